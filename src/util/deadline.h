// A point in time after which a blocking call gives up with TimeoutError.
#pragma once

#include <chrono>
#include <cstdint>

namespace chorus {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline after(std::chrono::milliseconds timeout) {
    return Deadline(Clock::now() + timeout);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, rounded up (so a poll() for that long does not wake early) and
  // clamped to [0, INT32_MAX] so it fits poll()'s argument.
  int remaining_ms() const {
    if (at_ == Clock::time_point::max()) return INT32_MAX;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left <= 0) return 0;
    return left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }
  Clock::time_point at() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace chorus
