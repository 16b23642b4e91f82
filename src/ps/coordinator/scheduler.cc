#include "ps/coordinator/scheduler.h"

#include <algorithm>

#include "chorus/error.h"
#include "util/log.h"

namespace chorus::ps::coordinator {

std::exception_ptr step_error(int worker, const std::string& kind, const std::string& message) {
  std::string text = "worker " + std::to_string(worker) + ": " + message;
  if (kind == kKindUnavailable) return std::make_exception_ptr(UnavailableError(text));
  return std::make_exception_ptr(Error(text));
}

Scheduler::Scheduler(int max_staleness, int max_attempts, Clock::time_point now)
    : max_staleness_(max_staleness),
      max_attempts_(std::max(1, max_attempts)),
      no_workers_since_(now),
      waiting_since_(now) {}

void Scheduler::note_waiting(Clock::time_point now) {
  if (queue_.empty()) waiting_since_ = now;
}

void Scheduler::push(std::shared_ptr<Step> step, Clock::time_point now) {
  note_waiting(now);
  queue_.push_back(std::move(step));
  ++outstanding_;
}

void Scheduler::push_failed(std::shared_ptr<Step> step, std::exception_ptr error) {
  ++outstanding_;
  fail(step, std::move(error));
}

void Scheduler::fail(const std::shared_ptr<Step>& step, std::exception_ptr error) {
  if (!first_error_) first_error_ = error;
  step->value->set_error(std::move(error));
  --outstanding_;
}

int64_t Scheduler::min_finished() const {
  if (workers_.empty()) return 0;
  int64_t low = INT64_MAX;
  for (const auto& [index, w] : workers_) low = std::min(low, w.counters.finished);
  return low;
}

void Scheduler::add_worker(int index) {
  int64_t low = min_finished();
  Worker& w = workers_[index];
  seen_.insert(index);
  w.counters = {low, low};
  w.running.reset();
}

void Scheduler::remove_worker(int index, Clock::time_point now, std::exception_ptr error) {
  auto it = workers_.find(index);
  if (it == workers_.end()) return;
  std::shared_ptr<Step> running = std::move(it->second.running);
  workers_.erase(it);
  if (workers_.empty()) no_workers_since_ = now;
  if (!running) return;
  ++running->lost;
  if (error) {
    fail(running, std::move(error));
  } else {
    if (queue_.empty()) waiting_since_ = now;
    requeue_or_fail(index, std::move(running));
  }
}

void Scheduler::requeue_or_fail(int index, std::shared_ptr<Step> step) {
  if (step->lost < max_attempts_) {
    CHORUS_LOG(kWarning, "coordinator")
        << "worker " << index << " was lost while running step '" << step->function << "' (#"
        << step->id << "); rescheduled on the next idle worker";
    queue_.push_front(std::move(step));  // it was the oldest running: it goes first again
    return;
  }
  fail(step, CHORUS_UNAVAILABLE_PTR("step '", step->function, "' (#", step->id, ") was lost ",
                                    step->lost, " times with its worker (last: worker ", index,
                                    "); giving up after max_attempts"));
}

std::shared_ptr<Step> Scheduler::take(int index) {
  auto it = workers_.find(index);
  if (it == workers_.end() || it->second.running || queue_.empty()) return nullptr;
  Worker& w = it->second;
  if (max_staleness_ >= 0 && w.counters.started - min_finished() > max_staleness_) {
    return nullptr;
  }
  std::shared_ptr<Step> step = std::move(queue_.front());
  queue_.pop_front();
  w.running = step;
  ++w.counters.started;
  step->value->count_attempt();
  return step;
}

void Scheduler::complete(int index, const ReplyMsg& reply) {
  auto it = workers_.find(index);
  if (it == workers_.end() || !it->second.running || it->second.running->id != reply.id) {
    CHORUS_THROW(IoError, "worker ", index, " replied to step #", reply.id,
                 ", which it was not running");
  }
  Worker& w = it->second;
  std::shared_ptr<Step> step = std::move(w.running);
  ++w.counters.finished;
  if (!reply.ok) {
    fail(step, step_error(index, reply.kind, reply.message));
    return;
  }
  step->value->set_value(index, reply.result);
  --outstanding_;
}

void Scheduler::fail_queued(std::exception_ptr error) {
  while (!queue_.empty()) {
    std::shared_ptr<Step> step = std::move(queue_.front());
    queue_.pop_front();
    fail(step, error);
  }
}

void Scheduler::fail_all(std::exception_ptr error) {
  fail_queued(error);
  for (auto& [index, w] : workers_) {
    if (w.running) fail(std::move(w.running), error);
    w.running.reset();
  }
}

std::optional<Clock::time_point> Scheduler::no_worker_deadline(
    std::chrono::milliseconds timeout) const {
  if (!workers_.empty() || queue_.empty()) return std::nullopt;
  return std::max(no_workers_since_, waiting_since_) + timeout;
}

std::exception_ptr Scheduler::take_first_error() {
  std::exception_ptr e = std::move(first_error_);
  first_error_ = nullptr;
  return e;
}

Scheduler::Counters Scheduler::counters(int index) const {
  auto it = workers_.find(index);
  return it == workers_.end() ? Counters{} : it->second.counters;
}

}  // namespace chorus::ps::coordinator
