// A TensorBoard event file: the scalar reader (TF1 simple values and TF2 tensors) and the
// file-version reader, over TFRecord framing.
#include "chorus/train/tfevents.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  fuzz::MemFile file(data, size);
  fuzz::expect_chorus_errors([&] { read_scalars(file.path()); });
  fuzz::expect_chorus_errors([&] { read_file_version(file.path()); });
  return 0;
}
