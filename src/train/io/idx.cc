// IDX reader (chorus/train/idx.h). zlib's gzread reads gzip and plain files alike.
#include "chorus/train/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <memory>

#include "chorus/error.h"
#include "util/byte_order.h"

namespace chorus {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

constexpr uint64_t kMaxBytes = uint64_t{1} << 34;  // far above any MNIST-family file
// Memory grows with the data read, never more than doubling it (and by kFirstChunk at
// first): a 16-byte header that announces 16 GiB costs 64 KiB, not a zero-filled chunk.
constexpr size_t kFirstChunk = size_t{64} << 10;
constexpr size_t kMaxChunk = size_t{64} << 20;

std::string existing(const std::string& path) {
  if (access(path.c_str(), R_OK) == 0) return path;
  if (access((path + ".gz").c_str(), R_OK) == 0) return path + ".gz";
  CHORUS_THROW(IoError, "IDX file ", path, " (or ", path, ".gz) not found or not readable");
}

// A read error is a corrupt gzip stream (InvalidArgument) or a failing disk (IoError).
[[noreturn]] void read_failed(gzFile f, const std::string& path) {
  int code = Z_OK;
  const char* msg = gzerror(f, &code);
  if (code == Z_ERRNO) CHORUS_THROW(IoError, "read of IDX file ", path, " failed: ", msg);
  CHORUS_THROW(InvalidArgument, "IDX file ", path, " is corrupt: ", msg);
}

void read_exact(gzFile f, void* out, size_t n, const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    // gzread takes an unsigned int: read in chunks.
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    int got = gzread(f, p, chunk);
    if (got < 0) read_failed(f, path);
    CHORUS_CHECK_ARG(got > 0, "IDX file ", path, " is truncated");
    p += got;
    n -= static_cast<size_t>(got);
  }
}

std::vector<int64_t> read_shape(gzFile f, const std::string& path) {
  uint8_t magic[4];
  read_exact(f, magic, 4, path);
  CHORUS_CHECK_ARG(
      magic[0] == 0 && magic[1] == 0 && magic[2] == 0x08 && magic[3] >= 1 && magic[3] <= 4,
      "IDX file ", path, " is not an IDX file of unsigned bytes (magic ", int{magic[0]}, " ",
      int{magic[1]}, " ", int{magic[2]}, " ", int{magic[3]}, ")");
  std::vector<int64_t> shape;
  uint64_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    uint8_t b[4];
    read_exact(f, b, 4, path);
    uint32_t n = byte_order::load_u32_be(b);
    shape.push_back(n);
    total *= n;  // at most 2^34 * 2^32 before the check: no overflow
    CHORUS_CHECK_ARG(total <= kMaxBytes, "IDX file ", path, ": implausible size");
  }
  return shape;
}

}  // namespace

IdxArray read_idx(const std::string& path_in) {
  const std::string path = existing(path_in);
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) CHORUS_THROW(IoError, "cannot open IDX file ", path);
  IdxArray a;
  a.shape = read_shape(f.get(), path);
  uint64_t total = 1;
  for (int64_t n : a.shape) total *= static_cast<uint64_t>(n);
  for (size_t done = 0; done < total;) {  // grows only as data arrives
    size_t chunk = std::min(std::max(kFirstChunk, done), kMaxChunk);
    chunk = static_cast<size_t>(std::min<uint64_t>(total - done, chunk));
    a.data.resize(done + chunk);
    read_exact(f.get(), a.data.data() + done, chunk, path);
    done += chunk;
  }
  return a;
}

}  // namespace chorus
