// TFRecord framing (chorus/train/tfrecord.h).
#include "chorus/train/tfrecord.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "chorus/error.h"
#include "util/byte_order.h"
#include "util/crc32c.h"
#include "util/log.h"

namespace chorus {
namespace {

constexpr size_t kHeaderSize = 12;  // uint64 length + uint32 masked CRC of the length
constexpr size_t kFooterSize = 4;   // uint32 masked CRC of the data

void encode_header(uint64_t length, uint8_t out[kHeaderSize]) {
  byte_order::store_u64(out, length);
  byte_order::store_u32(out + 8, crc32c_mask(crc32c(out, 8)));
}

void encode_footer(std::string_view data, uint8_t out[kFooterSize]) {
  byte_order::store_u32(out, crc32c_mask(crc32c(data.data(), data.size())));
}

}  // namespace

std::string frame_tfrecord(std::string_view record) {
  uint8_t header[kHeaderSize];
  uint8_t footer[kFooterSize];
  encode_header(record.size(), header);
  encode_footer(record, footer);
  std::string out;
  out.reserve(kHeaderSize + record.size() + kFooterSize);
  out.append(reinterpret_cast<const char*>(header), kHeaderSize);
  out.append(record);
  out.append(reinterpret_cast<const char*>(footer), kFooterSize);
  return out;
}

// ---- writer ----

TFRecordWriter::TFRecordWriter(const std::string& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "abe" : "wbe");
  if (!file_) {
    CHORUS_THROW(IoError, "cannot open TFRecord file ", path,
                 " for writing: ", std::strerror(errno));
  }
}

TFRecordWriter::~TFRecordWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    CHORUS_LOG(kError, "tfrecord") << e.what();
  }
}

void TFRecordWriter::put(const void* data, size_t n) {
  if (n > 0 && std::fwrite(data, 1, n, file_) != n) {
    CHORUS_THROW(IoError, "write to TFRecord file ", path_, " failed: ", std::strerror(errno));
  }
}

void TFRecordWriter::write(std::string_view record) {
  CHORUS_CHECK_ARG(file_ != nullptr, "write to closed TFRecord file ", path_);
  uint8_t header[kHeaderSize];
  uint8_t footer[kFooterSize];
  encode_header(record.size(), header);
  encode_footer(record, footer);
  put(header, kHeaderSize);
  put(record.data(), record.size());
  put(footer, kFooterSize);
}

void TFRecordWriter::flush() {
  CHORUS_CHECK_ARG(file_ != nullptr, "flush of closed TFRecord file ", path_);
  if (std::fflush(file_) != 0) {
    CHORUS_THROW(IoError, "flush of TFRecord file ", path_, " failed: ", std::strerror(errno));
  }
}

void TFRecordWriter::fsync() {
  flush();
  if (::fsync(fileno(file_)) != 0) {
    CHORUS_THROW(IoError, "fsync of TFRecord file ", path_, " failed: ", std::strerror(errno));
  }
}

void TFRecordWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;  // closed even if the flush fails: fclose releases it either way
  bool flushed = std::fflush(f) == 0;
  int err = errno;
  bool closed = std::fclose(f) == 0;
  if (!closed) err = errno;
  if (!flushed || !closed) {
    CHORUS_THROW(IoError, "close of TFRecord file ", path_, " failed: ", std::strerror(err));
  }
}

// ---- reader ----

TFRecordReader::TFRecordReader(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "rbe");
  if (!file_) {
    CHORUS_THROW(IoError, "cannot open TFRecord file ", path, ": ", std::strerror(errno));
  }
  try {
    update_size();
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

TFRecordReader::~TFRecordReader() { std::fclose(file_); }

void TFRecordReader::update_size() {
  struct stat st;
  if (::fstat(fileno(file_), &st) != 0) {
    CHORUS_THROW(IoError, "stat of TFRecord file ", path_, " failed: ", std::strerror(errno));
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
}

void TFRecordReader::corrupt(const std::string& why) const {
  CHORUS_THROW(InvalidArgument, "TFRecord file ", path_, ": ", why,
               " in the record at byte offset ", offset_, " (file size ", file_size_, ")");
}

void TFRecordReader::read_exact(void* out, size_t n, const char* what) {
  if (std::fread(out, 1, n, file_) == n) return;
  if (std::ferror(file_)) {
    CHORUS_THROW(IoError, "read of TFRecord file ", path_, " failed at byte offset ", offset_, ": ",
                 std::strerror(errno));
  }
  corrupt(std::string("truncated ") + what + " (the file shrank while being read)");
}

bool TFRecordReader::read(std::string& record) {
  try {
    return read_record(record);
  } catch (...) {
    // Stay before the bad record: a retry repeats the error, or succeeds once a writer
    // that was mid-record has finished.
    ::fseeko(file_, static_cast<off_t>(offset_), SEEK_SET);
    throw;
  }
}

bool TFRecordReader::read_record(std::string& record) {
  // The cached size is refreshed only when a record seems not to fit, so a file that
  // grows while being read is followed without a stat() per record.
  auto left = [this] { return file_size_ > offset_ ? file_size_ - offset_ : 0; };
  if (left() < kHeaderSize) update_size();
  if (left() == 0) return false;
  if (left() < kHeaderSize) {
    corrupt("truncated header (" + std::to_string(left()) + " of 12 bytes)");
  }
  uint8_t header[kHeaderSize];
  read_exact(header, kHeaderSize, "header");
  const uint64_t length = byte_order::load_u64(header);
  if (crc32c_mask(crc32c(header, 8)) != byte_order::load_u32(header + 8)) {
    corrupt("length checksum mismatch");
  }
  // Checked against the file before allocating: a corrupt length must not cost memory.
  const uint64_t needed = kHeaderSize + kFooterSize;
  auto fits = [&] { return left() >= needed && length <= left() - needed; };
  if (!fits()) update_size();
  if (!fits()) {
    corrupt("length " + std::to_string(length) + " exceeds the " + std::to_string(left()) +
            " bytes left (truncated data or corrupt length)");
  }
  record.resize(length);
  read_exact(record.data(), length, "data");
  uint8_t footer[kFooterSize];
  read_exact(footer, kFooterSize, "data checksum");
  if (crc32c_mask(crc32c(record.data(), record.size())) != byte_order::load_u32(footer)) {
    corrupt("data checksum mismatch");
  }
  offset_ += needed + length;
  return true;
}

std::vector<std::string> read_tfrecord_file(const std::string& path) {
  TFRecordReader reader(path);
  std::vector<std::string> records;
  std::string record;
  while (reader.read(record)) records.push_back(std::move(record));
  return records;
}

}  // namespace chorus
