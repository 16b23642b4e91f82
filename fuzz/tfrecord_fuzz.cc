// A TFRecord file: the streaming reader, record by record, and the whole-file reader. A
// record's length is untrusted: it must not be allocated before the file is known to hold
// it, and a bad CRC must be an error.
#include "chorus/train/tfrecord.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  fuzz::MemFile file(data, size);
  fuzz::expect_chorus_errors([&] {
    TFRecordReader reader(file.path());
    std::string record;
    while (reader.read(record)) {
    }
  });
  fuzz::expect_chorus_errors([&] { read_tfrecord_file(file.path()); });
  return 0;
}
