// Threads for a strategy's local replicas: run(fn) calls fn(i) for every replica i at once,
// replica 0 on the caller's thread, and returns when all are done. Persistent threads: a
// training step must not pay a thread start per replica.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus {

class ReplicaPool {
 public:
  explicit ReplicaPool(int replicas);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // Rethrows the first exception (by replica index) after every replica has finished.
  // Not reentrant: one run at a time.
  void run(const std::function<void(int replica)>& fn);

 private:
  void worker(int replica);

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace chorus
