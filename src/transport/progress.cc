#include "transport/progress.h"

#include <poll.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "chorus/error.h"

namespace chorus::transport {
namespace {

constexpr unsigned kSpinRounds = 4000;  // ~tens of microseconds of pure spinning
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
    size_t k;
    try {
      k = t.is_send ? t.link->try_send(t.data + t.done, t.size - t.done)
                    : t.link->try_recv(t.data + t.done, t.size - t.done);
    } catch (const IoError& e) {
      throw IoError(what() + ": " + e.what());
    }
    if (k > 0) {
      t.done += k;
      moved = true;
    }
  }
  if (moved) reset_backoff();
  return moved;
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

void Progress::check_alive(Transfer* transfers, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (transfers[i].complete()) continue;
    try {
      transfers[i].link->check_alive();
    } catch (const IoError& e) {
      throw IoError(what() + ": " + e.what());
    }
  }
}

void Progress::idle(Transfer* transfers, size_t n) {
  if (idle_rounds_ == 0) idle_since_ = last_alive_check_ = Clock::now();
  ++idle_rounds_;
  if (all_have_fds(transfers, n)) {
    if (deadline_.expired()) throw_timeout(transfers, n);
    wait_fds(transfers, n);
    return;
  }
  if (idle_rounds_ < kSpinRounds) {
    cpu_relax();
    return;
  }
  auto now = Clock::now();
  if (now >= deadline_.at()) throw_timeout(transfers, n);
  if (now - last_alive_check_ >= kAliveInterval) {
    last_alive_check_ = now;
    check_alive(transfers, n);
  }
  auto waited = now - idle_since_;
  if (waited < kYieldPhase) {
    sched_yield();
  } else {
    auto sleep = std::min<Clock::duration>(
        kMaxSleep, (waited - kYieldPhase) / 8 + std::chrono::microseconds(20));
    std::this_thread::sleep_for(sleep);
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
