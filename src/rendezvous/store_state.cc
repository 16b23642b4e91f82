#include "rendezvous/store_state.h"

#include <algorithm>

#include "rendezvous/store_protocol.h"

namespace chorus::rendezvous {
namespace {
constexpr auto kAbandonCheck = std::chrono::milliseconds(250);
}  // namespace

void StoreState::set(const std::string& key, std::string value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = std::move(value);
  }
  changed_.notify_all();
}

std::vector<std::string> StoreState::missing_locked(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (!data_.count(k)) out.push_back(k);
  }
  return out;
}

StoreState::WaitResult StoreState::wait_locked(std::unique_lock<std::mutex>& lock,
                                               const std::vector<std::string>& keys,
                                               Deadline deadline, const AbandonedFn& abandoned) {
  for (;;) {
    if (stopped_) return WaitResult::kStopped;
    if (missing_locked(keys).empty()) return WaitResult::kReady;
    if (deadline.expired()) return WaitResult::kTimedOut;
    auto until = std::min(deadline.at(), Clock::now() + kAbandonCheck);
    if (changed_.wait_until(lock, until) == std::cv_status::timeout && abandoned && abandoned()) {
      return WaitResult::kStopped;
    }
  }
}

std::optional<std::string> StoreState::get(const std::string& key, Deadline deadline,
                                           const AbandonedFn& abandoned, WaitResult* result) {
  std::unique_lock<std::mutex> lock(mu_);
  *result = wait_locked(lock, {key}, deadline, abandoned);
  if (*result != WaitResult::kReady) return std::nullopt;
  return data_.at(key);
}

std::vector<std::string> StoreState::wait(const std::vector<std::string>& keys, Deadline deadline,
                                          const AbandonedFn& abandoned, WaitResult* result) {
  std::unique_lock<std::mutex> lock(mu_);
  *result = wait_locked(lock, keys, deadline, abandoned);
  return missing_locked(keys);
}

int64_t StoreState::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    int64_t old = it == data_.end() ? 0 : parse_counter(key, it->second);
    value = checked_add(key, old, delta);
    data_[key] = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

bool StoreState::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return missing_locked(keys).empty();
}

bool StoreState::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

void StoreState::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  changed_.notify_all();
}

}  // namespace chorus::rendezvous
