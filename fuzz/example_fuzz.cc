// A serialized tf.train.Example (protobuf wire format, decoded without protobuf): what
// decodes must encode and decode again to the same features.
#include <cstdlib>

#include "chorus/train/example_proto.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  Features features;
  try {
    features = decode_example(fuzz::as_view(data, size));
  } catch (const Error&) {
    return 0;
  }
  std::string again = encode_example(features);
  if (encode_example(decode_example(again)) != again) std::abort();
  return 0;
}
