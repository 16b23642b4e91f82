#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>

#include "chorus/error.h"

namespace chorus::transport::shm {

void throw_corrupt_ring(uint64_t head, uint64_t tail, uint64_t capacity) {
  CHORUS_THROW(IoError, "shared-memory ring corrupted by the peer: head ", head, ", tail ", tail,
               ", capacity ", capacity);
}

namespace {

size_t segment_bytes(uint64_t ring_bytes) { return kHeaderBytes + 2 * ring_bytes; }

// MAP_POPULATE: the rings' pages are allocated (creator) and mapped (both sides) now, not
// on first touch in the middle of the first collectives that sweep the ring.
void* map_shared(int fd, size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    CHORUS_THROW(IoError, "mmap of a ", size,
                 "-byte shared-memory segment failed: ", std::strerror(errno));
  }
  return p;
}

}  // namespace

bool valid_ring_bytes(uint64_t ring_bytes) {
  return ring_bytes >= 4096 && ring_bytes <= (uint64_t{1} << 30) &&
         (ring_bytes & (ring_bytes - 1)) == 0;
}

Segment::~Segment() { unmap(); }

Segment::Segment(Segment&& other) noexcept
    : base_(other.base_), size_(other.size_), ring_bytes_(other.ring_bytes_) {
  other.base_ = nullptr;
  other.size_ = 0;
}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    unmap();
    base_ = other.base_;
    size_ = other.size_;
    ring_bytes_ = other.ring_bytes_;
    other.base_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void Segment::unmap() {
  if (base_ != nullptr) ::munmap(base_, size_);
  base_ = nullptr;
}

Segment Segment::create(uint64_t ring_bytes, net::Fd& fd) {
  CHORUS_CHECK_ARG(valid_ring_bytes(ring_bytes), "shared-memory ring size ", ring_bytes,
                   " must be a power of two in [4 KiB, 1 GiB]");
  size_t size = segment_bytes(ring_bytes);
  fd.reset(::memfd_create("chorus-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) CHORUS_THROW(IoError, "memfd_create failed: ", std::strerror(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    CHORUS_THROW(IoError, "sizing a ", size,
                 "-byte shared-memory segment failed: ", std::strerror(errno));
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    CHORUS_THROW(IoError, "sealing the shared-memory segment failed: ", std::strerror(errno));
  }
  Segment segment(map_shared(fd.get(), size), size, ring_bytes);
  auto* h = new (segment.base_) SegmentHeader{};
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->ring_bytes = ring_bytes;
  return segment;
}

Segment Segment::map_existing(int fd, uint64_t ring_bytes) {
  if (!valid_ring_bytes(ring_bytes)) {
    CHORUS_THROW(AuthError, "peer proposed an invalid shared-memory ring size ", ring_bytes);
  }
  size_t size = segment_bytes(ring_bytes);
  struct stat st {};
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != size || seals < 0 ||
      (seals & F_SEAL_SHRINK) == 0) {
    CHORUS_THROW(AuthError,
                 "peer passed a shared-memory segment of the wrong size or "
                 "without seals (expected ",
                 size, " bytes)");
  }
  Segment segment(map_shared(fd, size), size, ring_bytes);
  const SegmentHeader* h = segment.header();
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion || h->ring_bytes != ring_bytes) {
    CHORUS_THROW(AuthError, "peer passed a shared-memory segment with a bad header");
  }
  return segment;
}

}  // namespace chorus::transport::shm

namespace chorus::transport::shm {
// The layout documented in docs/wire_format.md.
static_assert(offsetof(SegmentHeader, ring_bytes) == 16);
static_assert(offsetof(SegmentHeader, aborted_by) == 64);
static_assert(offsetof(SegmentHeader, rings) == 128);
static_assert(sizeof(RingCounters) == 128);
static_assert(offsetof(SegmentHeader, doorbells) == 384);
static_assert(offsetof(Doorbell, sleeping) == 64 && sizeof(Doorbell) == 128);
static_assert(offsetof(SegmentHeader, probe_address) == 640);
}  // namespace chorus::transport::shm
