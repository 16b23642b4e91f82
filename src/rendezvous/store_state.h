// The key-value map behind TcpStoreServer, with blocking waits. Waiters sleep on a
// condition variable (woken by set/add or stop), never spin; they also wake every
// kAbandonCheck to ask whether their client has gone, so a client that timed out locally
// and disconnected does not pin a server thread until its (possibly long) timeout.
// Thread safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "util/deadline.h"

namespace chorus::rendezvous {

class StoreState {
 public:
  // Returns true when the waiting client has gone and the wait should end early.
  using AbandonedFn = std::function<bool()>;
  enum class WaitResult { kReady, kTimedOut, kStopped };

  void set(const std::string& key, std::string value);
  // The value once key exists; nullopt on timeout, stop or abandonment (see `result`).
  std::optional<std::string> get(const std::string& key, Deadline deadline,
                                 const AbandonedFn& abandoned, WaitResult* result);
  // Waits until every key exists; returns the keys still missing (empty when ready).
  std::vector<std::string> wait(const std::vector<std::string>& keys, Deadline deadline,
                                const AbandonedFn& abandoned, WaitResult* result);
  // InvalidArgument when the stored value is not an integer or the sum overflows.
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::vector<std::string>& keys);
  bool remove(const std::string& key);
  // Wakes every waiter with kStopped; later waits return at once.
  void stop();

 private:
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const;
  WaitResult wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                         Deadline deadline, const AbandonedFn& abandoned);

  std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> data_;  // guarded by mu_
  bool stopped_ = false;                               // guarded by mu_
};

}  // namespace chorus::rendezvous
