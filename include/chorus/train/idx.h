// Reading IDX files (the MNIST family's format), plain or gzip-compressed.
//
// IDX: magic 0x00 0x00 <type> <ndims>, then ndims big-endian uint32 sizes, then the data
// (row-major). Only type 0x08 (unsigned byte) with 1 to 4 dimensions is read, which is
// what (Fashion-)MNIST uses. Bytes after the data are ignored.
// Errors: IoError (missing or unreadable file), InvalidArgument (not an IDX byte file,
// truncated data, corrupt gzip stream); messages name the file.
// Memory grows with the data actually read, so a header claiming a huge size fails at
// the truncation instead of allocating it. Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

struct IdxArray {
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // product(shape) bytes
};

// `path` may name the file itself or lack its ".gz" (then path + ".gz" is tried too).
IdxArray read_idx(const std::string& path);

}  // namespace chorus
