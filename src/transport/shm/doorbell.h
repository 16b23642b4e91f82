// Doorbells let a shared-memory link block in the kernel instead of spinning, yielding or
// sleeping blind — all of which hand the core away for a whole time slice on a loaded host.
//
// Each side of a segment owns one Doorbell: a 32-bit futex word and a `sleeping` flag, each
// on its own cache line. The owner blocks with sleep_unless(); the peer calls
// wake_if_sleeping() after every change the owner may be waiting for (new data in a ring,
// or space freed in one). Nobody makes a system call unless someone actually sleeps.
//
// Why no wake-up is lost (the StoreLoad argument). Sleeper S and waker W run:
//   S: seen = rings;  sleeping = 1;  fence(seq_cst);  load ring counter;  futex_wait(seen)
//   W: store ring counter;            fence(seq_cst);  load sleeping;  if 1: ++rings, wake
// The two seq_cst fences are totally ordered. If S's fence comes first, W's load of
// `sleeping` (after W's fence) sees 1, so W bumps `rings` — after S read `seen`, so either
// the kernel's compare in futex_wait fails (EAGAIN) or the FUTEX_WAKE finds S queued.
// If W's fence comes first, S's load of the ring counter sees W's store and S does not sleep.
// Without the fences both loads could be satisfied before the other side's store is visible
// (x86 lets a load pass an earlier store), and S could sleep through W's update.
//
// The futex is shared (no FUTEX_PRIVATE_FLAG): the two sides are usually different processes
// mapping the same memfd with MAP_SHARED, and the kernel keys shared futexes by page.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace chorus::transport::shm {

constexpr size_t kCacheLine = 64;

struct Doorbell {
  alignas(kCacheLine) std::atomic<uint32_t> rings{0};     // futex word, bumped by each wake
  alignas(kCacheLine) std::atomic<uint32_t> sleeping{0};  // 1 while the owner may block
};
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "a futex word must be a plain 32-bit atomic");

// Bumps the doorbell and wakes its owner: always makes a system call. abort() uses it
// directly; the data path goes through wake_if_sleeping().
void ring(Doorbell& bell) noexcept;

// Waker side, after publishing a ring counter (release store). Cheap when nobody sleeps:
// a fence and a load of a line the owner rarely writes.
inline void wake_if_sleeping(Doorbell* bell) noexcept {
  if (bell == nullptr) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell->sleeping.load(std::memory_order_relaxed) != 0) ring(*bell);
}

// Blocks in FUTEX_WAIT while rings == seen, for at most `timeout`. Returns early on a wake,
// a changed word, a signal or the timeout alike: callers re-check their condition.
void futex_wait(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout);

// Owner side: blocks until the peer rings or `timeout` passes, unless can_progress() —
// which must load the ring counters the peer publishes — already says there is work.
template <typename Pred>
void sleep_unless(Doorbell& bell, Pred can_progress, std::chrono::nanoseconds timeout) {
  uint32_t seen = bell.rings.load(std::memory_order_acquire);
  bell.sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with wake_if_sleeping's
  if (!can_progress()) futex_wait(bell.rings, seen, timeout);
  // A stale 1 seen by the peer only costs it one needless wake.
  bell.sleeping.store(0, std::memory_order_relaxed);
}

}  // namespace chorus::transport::shm
