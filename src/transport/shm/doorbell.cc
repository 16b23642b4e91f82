#include "transport/shm/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace chorus::transport::shm {
namespace {

uint32_t* futex_word(std::atomic<uint32_t>& word) {
  return reinterpret_cast<uint32_t*>(&word);  // lock-free and the size of uint32_t
}

}  // namespace

void ring(Doorbell& bell) noexcept {
  bell.rings.fetch_add(1, std::memory_order_seq_cst);
  // Errors are not actionable: the worst case is a sleeper waking at the end of its slice.
  ::syscall(SYS_futex, futex_word(bell.rings), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec rel{static_cast<time_t>(secs.count()), static_cast<long>((timeout - secs).count())};
  // EAGAIN (word changed), EINTR and ETIMEDOUT all mean "go and look again".
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAIT, seen, &rel, nullptr, 0);
}

}  // namespace chorus::transport::shm
