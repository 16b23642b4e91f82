// The shared state behind a RemoteValue: filled once by the coordinator (a result or an
// error), read by any number of threads. It has its own lock so a RemoteValue may outlive
// its Coordinator. Lock order: Coordinator's lock, then this one; never the reverse.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "chorus/ps/coordinator.h"

namespace chorus::ps {

struct RemoteValue::State {
  // Both are no-ops once the value is set (a step completes once).
  void set_value(int worker, std::string value);
  void set_error(std::exception_ptr error);
  void count_attempt();

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool done = false;         // guarded by mu
  std::string value;         // guarded by mu; immutable once done
  std::exception_ptr error;  // guarded by mu
  int worker = -1;           // guarded by mu
  int attempts = 0;          // guarded by mu
};

}  // namespace chorus::ps
