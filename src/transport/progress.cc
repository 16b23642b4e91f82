#include "transport/progress.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "chorus/error.h"

namespace chorus::transport {
namespace {

// Pure spinning first: a partner running on another core answers a small message within
// about a microsecond, far sooner than any wake-up from the kernel.
constexpr auto kSpinPhase = std::chrono::microseconds(50);
constexpr unsigned kClockEvery = 16;  // spin rounds per clock read
// A link that can block (shared memory's futex) is blocked on only after this long: until
// then the wait spins and yields. A blocked thread lets its core idle, and an idle vCPU
// halts. In a KVM guest without halt polling, two bare training workers in lockstep ran up
// to 5.8 % faster when their barrier spun than when it blocked, in some states of the
// machine, and no faster in others (bench/python/idle_cost.py); 2-worker chorus.torch
// training ran a median 1.4 % faster with this (docs/benchmarks.md, 2026-11-28). But where
// a yield hands the core to another thread (more ranks than cores, a busy machine), the
// core is not idle anyway, and blocking is the faster return: the peer's ring wakes a
// blocked thread at once, a yielded one waits out the other's time slice. A look at the
// clock that comes this long after the last one means that happened, and the wait blocks
// from then on.
constexpr auto kBlockAfter = std::chrono::milliseconds(2);
constexpr auto kCoreTaken = std::chrono::microseconds(50);
// Blocking on one link (wait_ready) at a time, for at most this long, so that liveness is
// checked and the deadline enforced. Shorter when other links are waited on too, since
// only the chosen link's peer can wake us.
constexpr auto kWaitSlice = std::chrono::milliseconds(1);
constexpr auto kSharedWaitSlice = std::chrono::microseconds(100);
// Links that can neither poll() nor block: sched_yield, then sleeps.
constexpr auto kYieldPhase = std::chrono::milliseconds(2);
constexpr auto kMaxSleep = std::chrono::microseconds(500);
constexpr auto kAliveInterval = std::chrono::milliseconds(1);
constexpr int kMaxPollSliceMs = 100;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

bool Progress::poll(Transfer* transfers, size_t n) {
  bool moved = false;
  for (size_t i = 0; i < n; ++i) {
    Transfer& t = transfers[i];
    if (t.complete()) continue;
    begin(t);
    size_t k = naming_errors([&] {
      return t.is_send ? t.link->try_send(t.data + t.done, t.size - t.done)
                       : t.link->try_recv(t.data + t.done, t.size - t.done);
    });
    if (k > 0) {
      t.done += k;
      moved = true;
    }
  }
  if (moved) reset_backoff();
  return moved;
}

template <typename Call>
auto Progress::naming_errors(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const IoError& e) {
    throw IoError(what() + ": " + e.what());
  }
}

void Progress::begin(Transfer& t) {
  if (t.begun) return;
  t.begun = true;
  if (t.message > 0) naming_errors([&] { t.link->begin_message(t.is_send, t.message); });
}

const char* Progress::peek_recv(Transfer& t, size_t* available) {
  begin(t);
  return naming_errors([&] { return t.link->peek_recv(available); });
}

void Progress::read_peer_memory(Link& link, const PeerCopy* pieces, size_t n) {
  copy_peer_memory(link, pieces, n, false);
}

void Progress::write_peer_memory(Link& link, const PeerCopy* pieces, size_t n) {
  copy_peer_memory(link, pieces, n, true);
}

void Progress::copy_peer_memory(Link& link, const PeerCopy* pieces, size_t n, bool write) {
  naming_errors([&] {
    PeerMemory* memory = link.peer_memory();
    if (memory == nullptr) {
      CHORUS_THROW(IoError, write ? "writing" : "reading", " the peer's memory over ",
                   link.describe(), ": this link cannot");
    }
    write ? memory->write(pieces, n) : memory->read(pieces, n);
  });
}

void Progress::consume_recv(Transfer& t, size_t n) {
  t.link->consume_recv(n);
  t.done += n;
  if (n > 0) reset_backoff();
}

char* Progress::reserve_send(Transfer& t, size_t* available) {
  begin(t);
  return naming_errors([&] { return t.link->reserve_send(available); });
}

void Progress::commit_send(Transfer& t, size_t n) {
  t.link->commit_send(n);
  t.done += n;
  t.size = std::max(t.size, t.done);
  if (n > 0) reset_backoff();
}

bool Progress::input_buffered(Transfer* transfers, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Transfer& t = transfers[i];
    if (!t.complete() && !t.is_send && t.link->buffered_input()) return true;
  }
  return false;
}

bool Progress::all_have_fds(Transfer* transfers, size_t n) const {
  for (size_t i = 0; i < n; ++i) {
    if (!transfers[i].complete() && transfers[i].link->poll_fd() < 0) return false;
  }
  return true;
}

void Progress::wait_fds(Transfer* transfers, size_t n) {
  std::vector<pollfd> fds;
  fds.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Transfer& t = transfers[i];
    if (t.complete()) continue;
    fds.push_back(pollfd{t.link->poll_fd(), static_cast<short>(t.is_send ? POLLOUT : POLLIN), 0});
  }
  int slice = std::min(deadline_.remaining_ms(), kMaxPollSliceMs);
  int rc = ::poll(fds.data(), fds.size(), slice);
  if (rc < 0 && errno != EINTR) {
    throw IoError(what() + ": poll failed: " + std::strerror(errno));
  }
}

// A receive whose link still holds input is skipped: the peer may have sent its last bytes
// and exited since the last poll(), and the next poll() takes them. Sends are checked.
void Progress::check_alive(Transfer* transfers, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Transfer& t = transfers[i];
    if (t.complete()) continue;
    naming_errors([&] {
      if (t.is_send || !t.link->buffered_input()) t.link->check_alive();
    });
  }
}

// Blocks on the first incomplete receive on a link without a descriptor (whatever arrives
// there is what most algorithms wait for), else on such a send. False when none can block.
bool Progress::block_on_link(Transfer* transfers, size_t n, Clock::time_point now) {
  Transfer* chosen = nullptr;
  for (size_t i = 0; i < n; ++i) {
    Transfer& t = transfers[i];
    if (t.complete() || t.link->poll_fd() >= 0) continue;
    if (chosen == nullptr || (chosen->is_send && !t.is_send)) chosen = &t;
  }
  if (chosen == nullptr) return false;
  bool alone = true;
  for (size_t i = 0; i < n; ++i) {
    alone = alone && (transfers[i].complete() || transfers[i].link == chosen->link);
  }
  Clock::duration slice = alone ? Clock::duration(kWaitSlice) : kSharedWaitSlice;
  slice = std::min<Clock::duration>(slice, deadline_.at() - now);
  return chosen->link->wait_ready(chosen->is_send, slice);
}

void Progress::idle(Transfer* transfers, size_t n) {
  if (idle_rounds_ == 0) {
    idle_since_ = last_alive_check_ = last_look_ = Clock::now();
    core_taken_ = false;
  }
  ++idle_rounds_;
  bool sockets_only = all_have_fds(transfers, n);
  if (!sockets_only && idle_rounds_ % kClockEvery != 0) {
    cpu_relax();
    return;
  }
  auto now = Clock::now();
  if (now >= deadline_.at()) throw_timeout(transfers, n);
  auto waited = now - idle_since_;
  if (sockets_only) {
    // Each retry is a system call, so spinning here is cheap in count; it keeps the core
    // awake for an answer that is a few microseconds away, where sleeping in poll() on an
    // otherwise idle machine costs tens of microseconds to wake up.
    // Bytes a link has taken from its descriptor already would not wake poll().
    if (waited >= kSpinPhase && !input_buffered(transfers, n)) wait_fds(transfers, n);
    return;
  }
  if (now - last_alive_check_ >= kAliveInterval) {
    last_alive_check_ = now;
    check_alive(transfers, n);
  }
  core_taken_ = core_taken_ || now - last_look_ >= kCoreTaken;
  last_look_ = now;
  bool may_block = waited >= kBlockAfter || (waited >= kSpinPhase && core_taken_);
  if (may_block && block_on_link(transfers, n, now)) return;
  back_off(waited);
}

void Progress::back_off(Clock::duration waited) {
  if (waited < kSpinPhase) {
    cpu_relax();
    return;
  }
  waited -= kSpinPhase;
  if (waited < kYieldPhase) {
    sched_yield();
  } else {
    auto sleep = std::min<Clock::duration>(
        kMaxSleep, (waited - kYieldPhase) / 8 + std::chrono::microseconds(20));
    std::this_thread::sleep_for(sleep);
  }
}

void Progress::wait_until(const std::function<bool()>& ready, const std::vector<Link*>& links,
                          const std::function<std::string()>& waiting_for) {
  auto since = Clock::now(), last_alive_check = since;
  for (unsigned rounds = 1; !ready(); ++rounds) {
    if (rounds % kClockEvery != 0) {
      cpu_relax();
      continue;
    }
    auto now = Clock::now();
    if (now >= deadline_.at()) throw TimeoutError(what() + ": timed out " + waiting_for());
    if (now - last_alive_check >= kAliveInterval) {
      last_alive_check = now;
      try {
        for (Link* link : links) naming_errors([&] { link->check_alive(); });
      } catch (const IoError&) {
        if (ready()) return;  // the peer signalled and exited since ready() was last false
        throw;
      }
    }
    back_off(now - since);
  }
}

void Progress::finish(Transfer* transfers, size_t n) {
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < n; ++i) all = all && transfers[i].complete();
    if (all) return;
    if (!poll(transfers, n)) idle(transfers, n);
  }
}

void Progress::throw_timeout(Transfer* transfers, size_t n) const {
  std::ostringstream waiting;
  const char* sep = "";
  for (size_t i = 0; i < n; ++i) {
    const Transfer& t = transfers[i];
    if (t.complete()) continue;
    waiting << sep << (t.is_send ? "sending to " : "receiving from ") << t.link->describe() << " ("
            << (t.size - t.done) << " of " << t.size << " bytes left)";
    sep = ", ";
  }
  throw TimeoutError(what() + ": timed out " + waiting.str());
}

}  // namespace chorus::transport
