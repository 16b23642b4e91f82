#include "transport/shm/shm_link.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

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
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(liveness_.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    peer_pid_ = cred.pid;  // 0 when the peer is in a pid namespace we cannot see
  }
  std::atomic<uint64_t>& mine = h->probe_address[side_];
  mine.store(reinterpret_cast<uintptr_t>(&mine), std::memory_order_release);
}

bool ShmLink::probe() {
  if (peer_readable_ < 0) {
    uint64_t theirs = segment_.header()->probe_address[1 - side_].load(std::memory_order_acquire);
    uint64_t seen = 0;
    iovec local{&seen, sizeof seen};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(theirs)), sizeof seen};
    bool ok = peer_pid_ > 0 && theirs != 0 &&
              ::process_vm_readv(peer_pid_, &local, 1, &remote, 1, 0) == sizeof seen &&
              seen == theirs;
    peer_readable_ = ok ? 1 : 0;
  }
  return peer_readable_ == 1;
}

// As many pieces per system call as the kernel takes (IOV_MAX); a short count means a
// piece faulted part way, and the rest is retried from there so that the error names it.
void ShmLink::copy(const PeerCopy* pieces, size_t n, bool to_peer) {
  constexpr size_t kMaxPieces = 1024;  // IOV_MAX on Linux
  iovec local[kMaxPieces], remote[kMaxPieces];
  const char* verb = to_peer ? "writing" : "reading";
  while (n > 0) {
    if (broken()) throw_broken(to_peer ? "single-copy write" : "single-copy read");
    size_t batch = std::min(n, kMaxPieces), want = 0;
    for (size_t i = 0; i < batch; ++i) {
      local[i] = {pieces[i].local, pieces[i].len};
      remote[i] = {reinterpret_cast<void*>(pieces[i].remote), pieces[i].len};
      want += pieces[i].len;
    }
    ssize_t got = to_peer ? ::process_vm_writev(peer_pid_, local, batch, remote, batch, 0)
                          : ::process_vm_readv(peer_pid_, local, batch, remote, batch, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const char* why = got == 0 ? "nothing was copied" : std::strerror(errno);
      CHORUS_THROW(IoError, "rank ", rank_, ": ", verb, " ", want,
                   " bytes of the peer's memory over ", describe(), " failed: ", why);
    }
    if (static_cast<size_t>(got) < want) {  // finish the piece it stopped in, then go on
      size_t left = static_cast<size_t>(got), i = 0;
      while (i + 1 < batch && left >= pieces[i].len) left -= pieces[i++].len;
      PeerCopy rest{pieces[i].local + left, pieces[i].remote + left, pieces[i].len - left};
      copy(&rest, 1, to_peer);
      batch = i + 1;
    }
    pieces += batch;
    n -= batch;
  }
}

// Closing the socket (in liveness_'s destructor) is what tells the peer we are gone.
ShmLink::~ShmLink() = default;

int ShmLink::open_file(int remote_fd) {
  std::string path = "/proc/" + std::to_string(peer_pid_) + "/fd/" + std::to_string(remote_fd);
  int fd = peer_readable_ == 1 && remote_fd >= 0 ? ::open(path.c_str(), O_RDWR | O_CLOEXEC) : -1;
  if (fd < 0) {
    const char* why = peer_readable_ != 1 ? "the peer's memory was not probed readable"
                      : remote_fd < 0     ? "a negative descriptor"
                                          : std::strerror(errno);
    CHORUS_THROW(IoError, "rank ", rank_, ": opening descriptor ", remote_fd, " of the peer over ",
                 describe(), " failed: ", why);
  }
  return fd;
}

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

void ShmLink::abort(std::string_view reason) noexcept {
  if (locally_aborted_.exchange(true)) return;  // the reason is written once, before the flag
  shm::SegmentHeader* h = segment_.header();
  char* mine = h->abort_reason[side_];
  size_t n = std::min(reason.size(), shm::kAbortReasonBytes - 1);
  std::copy_n(reason.begin(), n, mine);  // not memcpy: an empty view's data() may be null
  mine[n] = '\0';
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
               " failed: the peer aborted the link", peer_abort_reason());
}

static_assert(shm::kAbortReasonBytes - 1 == kAbortReasonMax, "as long as a note's reason");

// " (<the peer's error>)", or "" when it gave none. The text is the peer's: only printable
// ASCII is kept, and no more than the slot holds even if its NUL is missing.
std::string ShmLink::peer_abort_reason() const {
  const shm::SegmentHeader* h = segment_.header();
  uint32_t by = h->aborted_by.load(std::memory_order_acquire);
  if (by != static_cast<uint32_t>(2 - side_)) return "";  // not aborted by the peer (1 + side)
  const char* theirs = h->abort_reason[1 - side_];
  std::string text = printable_reason({theirs, ::strnlen(theirs, shm::kAbortReasonBytes - 1)});
  return text.empty() ? "" : " (" + text + ")";
}

std::string ShmLink::describe() const {
  return "shm to rank " + std::to_string(peer()) + " (same host)";
}

}  // namespace chorus::transport
