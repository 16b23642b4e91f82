#include "chorus/error.h"
#include "ps/coordinator/remote_value_state.h"

namespace chorus::ps {

void RemoteValue::State::set_value(int by_worker, std::string result) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    value = std::move(result);
    worker = by_worker;
    done = true;
  }
  cv.notify_all();
}

void RemoteValue::State::set_error(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    error = std::move(e);
    done = true;
  }
  cv.notify_all();
}

void RemoteValue::State::count_attempt() {
  std::lock_guard<std::mutex> lock(mu);
  ++attempts;
}

namespace {

const RemoteValue::State& checked(const std::shared_ptr<RemoteValue::State>& state) {
  CHORUS_CHECK_ARG(state != nullptr, "empty RemoteValue (not returned by schedule())");
  return *state;
}

}  // namespace

bool RemoteValue::ready() const {
  const State& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done;
}

// The value never changes once done, so the reference stays valid after the lock is gone.
// No deadline here: the coordinator ends every step (see the header).
const std::string& RemoteValue::get() const {
  const State& s = checked(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return s.done; });
  if (s.error) std::rethrow_exception(s.error);
  return s.value;
}

int RemoteValue::worker() const {
  const State& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.worker;
}

int RemoteValue::attempts() const {
  const State& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.attempts;
}

}  // namespace chorus::ps
