// IDX reader (idx.h). zlib's gzread reads gzip and plain files alike.
#include "idx.h"

#include <unistd.h>
#include <zlib.h>

#include <memory>

#include "chorus/error.h"

namespace chorus::examples {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

std::string existing(const std::string& path) {
  if (access(path.c_str(), R_OK) == 0) return path;
  if (access((path + ".gz").c_str(), R_OK) == 0) return path + ".gz";
  CHORUS_THROW(IoError, "IDX file ", path, " (or ", path, ".gz) not found or not readable");
}

void read_exact(gzFile f, void* out, size_t n, const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    // gzread takes an unsigned int: read in chunks.
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    int got = gzread(f, p, chunk);
    CHORUS_CHECK_ARG(got > 0, "IDX file ", path, " is truncated");
    p += got;
    n -= static_cast<size_t>(got);
  }
}

}  // namespace

IdxArray read_idx(const std::string& path_in) {
  const std::string path = existing(path_in);
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) CHORUS_THROW(IoError, "cannot open ", path);
  uint8_t magic[4];
  read_exact(f.get(), magic, 4, path);
  CHORUS_CHECK_ARG(magic[0] == 0 && magic[1] == 0 && magic[2] == 0x08 && magic[3] >= 1 &&
                       magic[3] <= 4,
                   path, " is not an IDX file of unsigned bytes");
  IdxArray a;
  uint64_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    uint8_t b[4];
    read_exact(f.get(), b, 4, path);
    uint32_t n = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    a.shape.push_back(n);
    total *= n;
    CHORUS_CHECK_ARG(total <= (uint64_t{1} << 34), path, ": implausible size");
  }
  a.data.resize(total);
  read_exact(f.get(), a.data.data(), total, path);
  return a;
}

}  // namespace chorus::examples
