// An IDX file (MNIST's format): the dimensions in its header are untrusted.
#include "chorus/train/idx.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  fuzz::MemFile file(data, size);
  fuzz::expect_chorus_errors([&] { read_idx(file.path()); });
  return 0;
}
