#include "transport/shm/shm_link.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "chorus/error.h"

namespace chorus::transport {

ShmLink::ShmLink(int rank, int peer, int side, shm::Segment segment, net::Fd liveness)
    : Link(peer),
      rank_(rank),
      side_(side),
      segment_(std::move(segment)),
      liveness_(std::move(liveness)) {
  shm::SegmentHeader* h = segment_.header();
  uint64_t bytes = segment_.ring_bytes();
  writer_ = shm::RingWriter(&h->rings[side_], segment_.ring_data(side_), bytes);
  reader_ = shm::RingReader(&h->rings[1 - side_], segment_.ring_data(1 - side_), bytes);
}

// Closing the socket (in liveness_'s destructor) is what tells the peer we are gone.
ShmLink::~ShmLink() = default;

void ShmLink::check_alive() {
  if (broken()) throw_broken("liveness check");
  pollfd p{liveness_.get(), POLLIN, 0};
  int rc = ::poll(&p, 1, 0);
  if (rc < 0) {
    if (errno == EINTR) return;
    CHORUS_THROW(IoError, "rank ", rank_, ": polling ", describe(),
                 " failed: ", std::strerror(errno));
  }
  if (rc == 0) return;
  // The peer never writes to this socket after setup: readable means closed.
  CHORUS_THROW(IoError, "rank ", rank_, ": ", describe(),
               " is gone (its process exited or was killed)");
}

void ShmLink::abort() noexcept {
  locally_aborted_.store(true, std::memory_order_relaxed);
  uint32_t none = 0;
  segment_.header()->aborted_by.compare_exchange_strong(none, static_cast<uint32_t>(side_ + 1),
                                                        std::memory_order_release);
  ::shutdown(liveness_.get(), SHUT_RDWR);
}

void ShmLink::throw_broken(const char* op) const {
  if (locally_aborted_.load(std::memory_order_relaxed)) {
    CHORUS_THROW(IoError, "rank ", rank_, ": ", op, " on ", describe(),
                 " after this rank aborted the link");
  }
  CHORUS_THROW(IoError, "rank ", rank_, ": ", op, " on ", describe(),
               " failed: the peer aborted the link");
}

std::string ShmLink::describe() const {
  return "shm to rank " + std::to_string(peer()) + " (same host)";
}

}  // namespace chorus::transport
