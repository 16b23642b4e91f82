// TFRecord files: TensorFlow's framing of a stream of byte records, read and written
// exactly as TensorFlow does, so files are interchangeable with tf.data.
//
// A record on disk: uint64 length (little-endian), uint32 masked_crc32c(the 8 length
// bytes), `length` data bytes, uint32 masked_crc32c(data). masked(c) =
// ((c >> 15) | (c << 17)) + 0xa282ead8. CRC-32C is Castagnoli (util/crc32c.h).
//
// Nothing read is trusted: a length is checked against what the file still holds before
// anything is allocated, and both checksums are verified before a record is returned.
//
// Errors: IoError (cannot open / read / write), InvalidArgument for a corrupt or truncated
// file — the message names the file and the byte offset of the bad record.
// Thread safety: one thread per reader or writer object.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

class TFRecordWriter {
 public:
  // Creates (truncates) `path`; with `append`, appends to an existing file.
  explicit TFRecordWriter(const std::string& path, bool append = false);
  ~TFRecordWriter();  // close(), errors logged
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  // REQUIRES: not closed (InvalidArgument otherwise).
  void write(std::string_view record);
  void flush();  // to the OS (fflush); fsync() to disk as well
  void fsync();
  void close();  // flush + close; idempotent
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;

  void put(const void* data, size_t n);
};

class TFRecordReader {
 public:
  explicit TFRecordReader(const std::string& path);
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // The next record into `record`; false at a clean end of file (no partial record).
  // Records appended to the file after a false are seen by later calls. After an error
  // the reader stays before the bad record, so calling again repeats the error.
  bool read(std::string& record);
  // Byte offset of the next record.
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
  uint64_t file_size_ = 0;

  bool read_record(std::string& record);
  void read_exact(void* out, size_t n, const char* what);
  [[noreturn]] void corrupt(const std::string& why) const;
  void update_size();
};

// Every record of a file (tests, small files).
std::vector<std::string> read_tfrecord_file(const std::string& path);

// The framing itself, for code that frames records in memory.
std::string frame_tfrecord(std::string_view record);

}  // namespace chorus
