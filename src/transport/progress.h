// Progress drives a set of transfers on (possibly different kinds of) links from the calling
// thread: it moves bytes without blocking and, when nothing moves, waits in the cheapest way
// the links allow — poll() when every waiting link has a descriptor; otherwise a short spin
// and sched_yield for about 2 ms while the core has nothing else to run (an idle core would
// halt its vCPU), then blocking on one link that supports Link::wait_ready (shared memory:
// a futex the peer rings) in slices of about a millisecond, or, where no link can block,
// brief sleeps. Peer liveness is checked about every millisecond.
// It never waits past its Deadline: TimeoutError names the operation and the waiting peers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "transport/link.h"
#include "util/deadline.h"

namespace chorus::transport {

struct Transfer {
  Link* link = nullptr;
  bool is_send = false;
  char* data = nullptr;
  size_t size = 0;
  size_t done = 0;
  // The whole message this transfer carries, when the peer moves the same bytes as one
  // transfer with the same `message` (Link::begin_message); 0 when that is not known. A send
  // may grow `size` up to it as its bytes become ready.
  size_t message = 0;
  bool begun = false;  // Link::begin_message was called

  static Transfer send(Link& link, const void* data, size_t size) {
    return Transfer{&link, true, static_cast<char*>(const_cast<void*>(data)), size, 0, 0, false};
  }
  static Transfer recv(Link& link, void* data, size_t size) {
    return Transfer{&link, false, static_cast<char*>(data), size, 0, 0, false};
  }
  // A whole message, matched by the peer's send_message / recv_message of the same size
  // (the collectives' exchanges): a link may frame it. A send whose bytes become ready
  // as it goes starts at `size` and grows to `message`.
  static Transfer send_message(Link& link, const void* data, size_t size, size_t message) {
    Transfer t = send(link, data, size);
    t.message = message;
    return t;
  }
  static Transfer send_message(Link& link, const void* data, size_t size) {
    return send_message(link, data, size, size);
  }
  static Transfer recv_message(Link& link, void* data, size_t size) {
    Transfer t = recv(link, data, size);
    t.message = size;
    return t;
  }
  bool complete() const { return done == size; }
};

class Progress {
 public:
  // Names the operation in error messages, e.g. "allreduce of 1024 float32 (rank 2 of 4)".
  using Describe = std::function<std::string()>;

  Progress(Deadline deadline, std::string what) : deadline_(deadline), what_(std::move(what)) {}
  // The description is built only when an error is raised, keeping string formatting off
  // the path of every small collective. `describe` must outlive this Progress' use.
  Progress(Deadline deadline, Describe describe)
      : deadline_(deadline), describe_(std::move(describe)) {}

  // One non-blocking pass over the incomplete transfers. Returns true when any byte moved.
  // Link errors are rethrown with the operation's name prepended (same exception type).
  bool poll(Transfer* transfers, size_t n);

  // Zero-copy receive for transfer t (a receive): Link::peek_recv / consume_recv with the
  // same error reporting as poll(). consume_recv advances t.done by n.
  const char* peek_recv(Transfer& t, size_t* available);
  void consume_recv(Transfer& t, size_t n);

  // Zero-copy send for transfer t (a send): Link::reserve_send / commit_send, likewise.
  // commit_send advances t.done by n (and t.size with it, where the bytes went past it).
  char* reserve_send(Transfer& t, size_t* available);
  void commit_send(Transfer& t, size_t n);

  // The link's PeerMemory::read / write with the same error reporting as poll(); IoError
  // when the link has no peer memory.
  void read_peer_memory(Link& link, const PeerCopy* pieces, size_t n);
  void write_peer_memory(Link& link, const PeerCopy* pieces, size_t n);

  // Called when poll() moved nothing: waits for a chance of progress, following the
  // backoff above. Throws TimeoutError when the deadline has passed.
  void idle(Transfer* transfers, size_t n);

  // poll()/idle() until every transfer is complete.
  void finish(Transfer* transfers, size_t n);

  // Waits until ready() returns true — for peers that signal through shared memory rather
  // than through transfers — backing off like idle() (spin, yield, sleep) and checking the
  // liveness of `links` about every millisecond (a peer that signalled before it exited is
  // not an error). At the deadline, TimeoutError with "timed out " + waiting_for().
  void wait_until(const std::function<bool()>& ready, const std::vector<Link*>& links,
                  const std::function<std::string()>& waiting_for);

  const Deadline& deadline() const { return deadline_; }
  std::string what() const { return describe_ ? describe_() : what_; }

 private:
  void reset_backoff() { idle_rounds_ = 0; }
  // Tells the link, once, before a transfer's first byte, that it carries a whole message.
  void begin(Transfer& t);
  // The part of a wait that sleeps nowhere in particular: spin, then yield, then sleep
  // longer the longer it has `waited`.
  static void back_off(Clock::duration waited);
  // Runs a link call; an IoError from it is rethrown with the operation's name prepended.
  template <typename Call>
  auto naming_errors(Call&& call) -> decltype(call());
  bool all_have_fds(Transfer* transfers, size_t n) const;
  // Whether an incomplete receive's link holds bytes already taken from its descriptor.
  static bool input_buffered(Transfer* transfers, size_t n);
  void wait_fds(Transfer* transfers, size_t n);
  void check_alive(Transfer* transfers, size_t n);
  bool block_on_link(Transfer* transfers, size_t n, Clock::time_point now);
  void copy_peer_memory(Link& link, const PeerCopy* pieces, size_t n, bool write);
  [[noreturn]] void throw_timeout(Transfer* transfers, size_t n) const;

  Deadline deadline_;
  std::string what_;
  Describe describe_;
  unsigned idle_rounds_ = 0;
  Clock::time_point idle_since_{};
  Clock::time_point last_alive_check_{};
  // This wait's last look at the clock, and whether the core was taken from it since it
  // began (see kBlockAfter in progress.cc).
  Clock::time_point last_look_{};
  bool core_taken_ = false;
};

}  // namespace chorus::transport
