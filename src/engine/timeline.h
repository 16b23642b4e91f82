// A Chrome-trace ("Trace Event Format") writer: one row per tensor, one complete ("X")
// event per phase (NEGOTIATE, QUEUE, MEMCPY_IN_FUSION_BUFFER, ALLREDUCE, ...); the events
// of collectives name the communicator's plan in args.plan ("ring (single-copy)" ...). The file is
// a JSON array; stop() (or the destructor) writes the closing bracket, so a stopped
// timeline is valid JSON. Loaders also accept an unclosed array after a crash.
//
// Thread safety: start/stop from any thread; span() from the engine thread (also locked).
#pragma once

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "util/deadline.h"

namespace chorus::engine {

class Timeline {
 public:
  Timeline() = default;
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Opens (truncates) `path`; closes any timeline being written. IoError on failure.
  void start(const std::string& path);
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // One phase of `tensor`, from `begin` to `end`; `plan` (a static name without quotes or
  // backslashes, or null) is how its collective ran (Communicator::last_plan).
  void span(const std::string& tensor, const char* phase, Clock::time_point begin,
            Clock::time_point end, const char* plan = nullptr);

 private:
  int row_locked(const std::string& tensor);
  void close_locked();

  std::mutex mu_;
  std::FILE* file_ = nullptr;                  // guarded by mu_
  bool first_event_ = true;                    // guarded by mu_
  Clock::time_point origin_;                   // guarded by mu_
  std::unordered_map<std::string, int> rows_;  // guarded by mu_
  std::atomic<bool> active_{false};
};

}  // namespace chorus::engine
