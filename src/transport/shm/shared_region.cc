#include "transport/shm/shared_region.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "chorus/error.h"

namespace chorus::transport::shm {
namespace {

struct RegionHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t data_bytes;
  uint64_t nonce[2];
};

size_t mapped_bytes(uint64_t data_bytes) {
  return kRegionHeaderBytes + ((data_bytes + kRegionHeaderBytes - 1) & ~(kRegionHeaderBytes - 1));
}

void random_nonce(uint64_t (&nonce)[2]) {
  char* at = reinterpret_cast<char*>(nonce);
  size_t got = 0;
  while (got < sizeof nonce) {
    ssize_t n = ::getrandom(at + got, sizeof nonce - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) CHORUS_THROW(IoError, "getrandom failed: ", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
}

}  // namespace

void Region::close_descriptor() {
  fd_.reset();
  identity_.fd = -1;
}

Region Region::create(size_t data_bytes, Pages pages) {
  CHORUS_CHECK_ARG(data_bytes > 0 && data_bytes <= kMaxRegionBytes, "shared region of ", data_bytes,
                   " bytes: must be 1 .. ", kMaxRegionBytes);
  Region r;
  size_t size = mapped_bytes(data_bytes);
  r.fd_ = create_sealed_memfd("chorus-region", size);
  r.mapping_ = Mapping::map(r.fd_.get(), size, pages);
  r.identity_.fd = r.fd_.get();
  r.identity_.data_bytes = data_bytes;
  random_nonce(r.identity_.nonce);
  auto* h = reinterpret_cast<RegionHeader*>(r.mapping_.data());
  *h = RegionHeader{
      kRegionMagic, kRegionVersion, 0, data_bytes, {r.identity_.nonce[0], r.identity_.nonce[1]}};
  return r;
}

Region Region::map_peer(net::Fd file, const RegionIdentity& expected, Pages pages) {
  if (expected.data_bytes == 0 || expected.data_bytes > kMaxRegionBytes) {
    CHORUS_THROW(AuthError, "peer announced a shared region of ", expected.data_bytes, " bytes");
  }
  size_t size = mapped_bytes(expected.data_bytes);
  if (!has_size_and_shrink_seal(file.get(), size)) {
    CHORUS_THROW(AuthError, "peer's shared region has the wrong size or no seals (expected ", size,
                 " bytes)");
  }
  Region r;
  r.mapping_ = Mapping::map(file.get(), size, pages);
  r.identity_ = expected;
  r.identity_.fd = -1;
  const auto* h = reinterpret_cast<const RegionHeader*>(r.mapping_.data());
  if (h->magic != kRegionMagic || h->version != kRegionVersion ||
      h->data_bytes != expected.data_bytes || h->nonce[0] != expected.nonce[0] ||
      h->nonce[1] != expected.nonce[1]) {
    CHORUS_THROW(AuthError, "peer's shared region has a header other than announced");
  }
  return r;
}

}  // namespace chorus::transport::shm
