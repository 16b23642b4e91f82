#include "transport/shm/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

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

char* map(int fd, size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    CHORUS_THROW(IoError, "mmap of a ", size, "-byte shared region failed: ", std::strerror(errno));
  }
  return static_cast<char*>(p);
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

Region::~Region() { unmap(); }

Region::Region(Region&& other) noexcept
    : base_(other.base_),
      mapped_(other.mapped_),
      identity_(other.identity_),
      fd_(std::move(other.fd_)) {
  other.base_ = nullptr;
  other.mapped_ = 0;
}

Region& Region::operator=(Region&& other) noexcept {
  if (this != &other) {
    unmap();
    base_ = other.base_;
    mapped_ = other.mapped_;
    identity_ = other.identity_;
    fd_ = std::move(other.fd_);
    other.base_ = nullptr;
    other.mapped_ = 0;
  }
  return *this;
}

void Region::unmap() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
  base_ = nullptr;
}

void Region::close_descriptor() {
  fd_.reset();
  identity_.fd = -1;
}

Region Region::create(size_t data_bytes) {
  CHORUS_CHECK_ARG(data_bytes > 0 && data_bytes <= kMaxRegionBytes, "shared region of ", data_bytes,
                   " bytes: must be 1 .. ", kMaxRegionBytes);
  Region r;
  size_t size = mapped_bytes(data_bytes);
  r.fd_.reset(::memfd_create("chorus-region", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!r.fd_.valid()) CHORUS_THROW(IoError, "memfd_create failed: ", std::strerror(errno));
  if (::ftruncate(r.fd_.get(), static_cast<off_t>(size)) != 0) {
    CHORUS_THROW(IoError, "sizing a ", size, "-byte shared region failed: ", std::strerror(errno));
  }
  // Sealed: a peer cannot shrink the file under our mappings (SIGBUS on access).
  if (::fcntl(r.fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    CHORUS_THROW(IoError, "sealing a shared region failed: ", std::strerror(errno));
  }
  r.base_ = map(r.fd_.get(), size);
  r.mapped_ = size;
  r.identity_.fd = r.fd_.get();
  r.identity_.data_bytes = data_bytes;
  random_nonce(r.identity_.nonce);
  auto* h = reinterpret_cast<RegionHeader*>(r.base_);
  *h = RegionHeader{
      kRegionMagic, kRegionVersion, 0, data_bytes, {r.identity_.nonce[0], r.identity_.nonce[1]}};
  return r;
}

Region Region::map_peer(net::Fd file, const RegionIdentity& expected) {
  if (expected.data_bytes == 0 || expected.data_bytes > kMaxRegionBytes) {
    CHORUS_THROW(AuthError, "peer announced a shared region of ", expected.data_bytes, " bytes");
  }
  size_t size = mapped_bytes(expected.data_bytes);
  struct stat st {};
  int seals = ::fcntl(file.get(), F_GET_SEALS);
  if (::fstat(file.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != size || seals < 0 ||
      (seals & F_SEAL_SHRINK) == 0) {
    CHORUS_THROW(AuthError, "peer's shared region has the wrong size or no seals (expected ", size,
                 " bytes)");
  }
  Region r;
  r.base_ = map(file.get(), size);
  r.mapped_ = size;
  r.identity_ = expected;
  r.identity_.fd = -1;
  const auto* h = reinterpret_cast<const RegionHeader*>(r.base_);
  if (h->magic != kRegionMagic || h->version != kRegionVersion ||
      h->data_bytes != expected.data_bytes || h->nonce[0] != expected.nonce[0] ||
      h->nonce[1] != expected.nonce[1]) {
    CHORUS_THROW(AuthError, "peer's shared region has a header other than announced");
  }
  return r;
}

}  // namespace chorus::transport::shm
