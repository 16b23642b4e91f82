// The shared memory behind one shared-memory link: a header page (magic, ring size, the
// shared 'aborted' flag, the two rings' counters, one doorbell per side) followed by one
// ring per direction.
//
// The segment is an anonymous memfd: it has no name anywhere (nothing in /dev/shm), its
// descriptor is passed to the peer over a Unix socket, and the kernel frees it when the
// last mapping goes away — also when both processes are SIGKILLed. It is sealed against
// shrinking so that a peer cannot make our accesses fault (SIGBUS).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/shm/mapping.h"
#include "transport/shm/shm_ring.h"
#include "util/net.h"

namespace chorus::transport::shm {

// Room for why an end aborted, terminating NUL included: enough for a rank's error message.
constexpr size_t kAbortReasonBytes = 512;

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t ring_bytes;
  // 0 while healthy; 1 + side of the end that called abort().
  alignas(kCacheLine) std::atomic<uint32_t> aborted_by;
  RingCounters rings[2];  // rings[s] carries bytes from side s to side 1 - s
  Doorbell doorbells[2];  // doorbells[s] is where side s sleeps; the other side rings it
  // probe_address[s]: where side s's process maps probe_address[s] itself (0 until set).
  // The other side reads that address out of side s's memory (process_vm_readv) and must
  // find the same value there: proof that it may read side s's memory and that the pid it
  // holds is side s's process (see ShmLink::probe).
  alignas(kCacheLine) std::atomic<uint64_t> probe_address[2];
  // abort_reason[s]: why side s aborted (its error, NUL-terminated), written before side s
  // stores aborted_by. The other side takes it as text for its own error and nothing else.
  alignas(kCacheLine) char abort_reason[2][kAbortReasonBytes];
};

constexpr uint64_t kSegmentMagic = 0x67655373756f6863ull;  // "chorusSeg"
// 2: doorbells, 3: probe addresses, 4: abort reasons.
constexpr uint32_t kSegmentVersion = 4;
constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(SegmentHeader) <= kHeaderBytes, "header must fit its page");

// Ring sizes accepted from a peer: powers of two in [4 KiB, 1 GiB].
bool valid_ring_bytes(uint64_t ring_bytes);

class Segment {
 public:
  // Creates, sizes, seals and maps a new segment; `fd` receives its descriptor (to pass to
  // the peer; close it once the peer has it). Throws IoError when memory is short.
  static Segment create(uint64_t ring_bytes, net::Fd& fd);
  // Maps a segment received from a peer after checking its size, seals and header.
  // Throws AuthError when it is not a well-formed chorus segment of ring_bytes.
  static Segment map_existing(int fd, uint64_t ring_bytes);

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(mapping_.data()); }
  char* ring_data(int side) const {
    return mapping_.data() + kHeaderBytes + static_cast<size_t>(side) * ring_bytes_;
  }
  uint64_t ring_bytes() const { return ring_bytes_; }

 private:
  Mapping mapping_;
  uint64_t ring_bytes_ = 0;
};

}  // namespace chorus::transport::shm
