// The engine's negotiation message: what one rank tells the others it wants to run. Each
// request that decodes must encode back to the bytes it came from (the message is the
// concatenation of its requests), and every size derived from it must be computable.
#include <cstdlib>

#include "engine/request.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  if (size < 2) return 0;
  const int world = 1 + data[0] % 16;  // rank `from` of `world` sent the rest
  const int from = data[1] % world;
  std::vector<engine::Request> requests;
  fuzz::expect_chorus_errors(
      [&] { requests = engine::decode_requests(data + 2, size - 2, from, world); });
  if (requests.empty()) return 0;
  std::vector<const engine::Request*> pointers;
  for (const auto& r : requests) {
    pointers.push_back(&r);
    r.bytes();
    r.row_elements();
    engine::shape_text(r.shape);
  }
  std::string again;
  engine::encode_requests(pointers, again);
  if (again != std::string(fuzz::as_view(data + 2, size - 2))) std::abort();
  return 0;
}
