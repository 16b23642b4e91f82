#include "train/replica_pool.h"

#include "chorus/error.h"

namespace chorus {

ReplicaPool::ReplicaPool(int replicas) : errors_(static_cast<size_t>(replicas)) {
  CHORUS_CHECK_ARG(replicas >= 1, "a strategy needs at least one replica, got ", replicas);
  for (int i = 1; i < replicas; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::run(const std::function<void(int)>& fn) {
  for (auto& e : errors_) e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &fn;
    pending_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }
  for (auto& e : errors_) {
    if (e) std::rethrow_exception(e);
  }
}

void ReplicaPool::worker(int replica) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    try {
      (*task)(replica);
    } catch (...) {
      errors_[static_cast<size_t>(replica)] = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

}  // namespace chorus
