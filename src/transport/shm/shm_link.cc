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
  shm::Doorbell* peer_bell = &h->doorbells[1 - side_];
  writer_ = shm::RingWriter(&h->rings[side_], segment_.ring_data(side_), bytes, peer_bell);
  reader_ = shm::RingReader(&h->rings[1 - side_], segment_.ring_data(1 - side_), bytes, peer_bell);
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

bool ShmLink::wait_ready(bool for_send, std::chrono::nanoseconds max_wait) {
  // The peer's ring counters are loaded after sleep_unless's fence (see doorbell.h), and
  // so is `aborted_by`: abort() sets it before ringing.
  auto can_progress = [&] {
    return broken() || (for_send ? writer_.has_space() : reader_.has_data());
  };
  shm::sleep_unless(segment_.header()->doorbells[side_], can_progress, max_wait);
  return true;
}

void ShmLink::abort() noexcept {
  locally_aborted_.store(true, std::memory_order_relaxed);
  shm::SegmentHeader* h = segment_.header();
  uint32_t none = 0;
  h->aborted_by.compare_exchange_strong(none, static_cast<uint32_t>(side_ + 1),
                                        std::memory_order_seq_cst);
  // Both sides: the peer, and this side when another thread drives it and sleeps.
  shm::ring(h->doorbells[0]);
  shm::ring(h->doorbells[1]);
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
