// TF_CONFIG, the JSON a tf.distribute cluster hands each task: parsed on its own, then read
// as the job's environment (the launcher-environment path every strategy takes).
#include "fuzz_support.h"
#include "rendezvous/tf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  std::string text(fuzz::as_view(data, size));
  fuzz::expect_chorus_errors([&] { tf_config::parse(text); });
  return 0;
}
