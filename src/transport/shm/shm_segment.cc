#include "transport/shm/shm_segment.h"

#include <cstddef>
#include <new>

#include "chorus/error.h"

namespace chorus::transport::shm {

void throw_corrupt_ring(uint64_t head, uint64_t tail, uint64_t capacity) {
  CHORUS_THROW(IoError, "shared-memory ring corrupted by the peer: head ", head, ", tail ", tail,
               ", capacity ", capacity);
}

namespace {

size_t segment_bytes(uint64_t ring_bytes) { return kHeaderBytes + 2 * ring_bytes; }

}  // namespace

bool valid_ring_bytes(uint64_t ring_bytes) {
  return ring_bytes >= 4096 && ring_bytes <= (uint64_t{1} << 30) &&
         (ring_bytes & (ring_bytes - 1)) == 0;
}

Segment Segment::create(uint64_t ring_bytes, net::Fd& fd) {
  CHORUS_CHECK_ARG(valid_ring_bytes(ring_bytes), "shared-memory ring size ", ring_bytes,
                   " must be a power of two in [4 KiB, 1 GiB]");
  size_t size = segment_bytes(ring_bytes);
  fd = create_sealed_memfd("chorus-shm", size);
  Segment segment;
  segment.mapping_ = Mapping::map(fd.get(), size);
  segment.ring_bytes_ = ring_bytes;
  auto* h = new (segment.mapping_.data()) SegmentHeader{};
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
  if (!has_size_and_shrink_seal(fd, size)) {
    CHORUS_THROW(AuthError,
                 "peer passed a shared-memory segment of the wrong size or "
                 "without seals (expected ",
                 size, " bytes)");
  }
  Segment segment;
  segment.mapping_ = Mapping::map(fd, size);
  segment.ring_bytes_ = ring_bytes;
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
static_assert(offsetof(SegmentHeader, abort_reason) == 704);
}  // namespace chorus::transport::shm
