// chorusrun's hosts: a hostfile ("host", "host:4", "host slots=4", '#' comments) and the
// same input as a -H list ("a:2,b,[::1]:4"), then the placement of ranks on what parsed.
// Bad input is chorusrun's UsageError (exit code 2); nothing here resolves a name.
#include "fuzz_support.h"
#include "hosts.h"
#include "options.h"

namespace chorus::fuzz {
namespace {

template <class F>
void expect_usage_errors(F&& parse) {
  try {
    parse();
  } catch (const run::UsageError&) {
  }
}

void place(const std::vector<run::HostSlots>& hosts, size_t size) {
  if (hosts.empty()) return;
  int np = 1 + static_cast<int>(size % 64);
  expect_usage_errors([&] { run::place_ranks(hosts, np, size % 2 == 0); });
}

}  // namespace
}  // namespace chorus::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  fuzz::MemFile file(data, size);
  fuzz::expect_usage_errors([&] { fuzz::place(run::read_hostfile(file.path()), size); });
  std::string text(fuzz::as_view(data, size));
  fuzz::expect_usage_errors([&] { fuzz::place(run::parse_host_list(text), size); });
  return 0;
}
