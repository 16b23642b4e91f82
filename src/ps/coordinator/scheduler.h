// The coordinator's bookkeeping, without sockets or threads: the FIFO queue of steps, the
// step each worker runs, per-worker started/finished counters for bounded staleness, lost
// attempts, and the errors join() reports. Coordinator::Impl calls it under its lock;
// Scheduler itself is not thread-safe.
//
// Staleness rule (docs/coordinator.md): with S >= 0, take(w) hands out a step only when
// started(w) - min over live workers of finished <= S, both counted before this dispatch.
// A worker added later starts with started = finished = that minimum.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "chorus/error.h"
#include "ps/coordinator/protocol.h"
#include "ps/coordinator/remote_value_state.h"
#include "util/deadline.h"

// An exception_ptr to a new UnavailableError with the usual "[file:line] " prefix, for
// failing RemoteValues (which store exceptions rather than throw them).
#define CHORUS_UNAVAILABLE_PTR(...) \
  std::make_exception_ptr(          \
      ::chorus::UnavailableError(::chorus::detail::make_message(__FILE__, __LINE__, __VA_ARGS__)))

namespace chorus::ps::coordinator {

struct Step {
  int64_t id = 0;
  std::string function;
  std::string argument;
  std::shared_ptr<RemoteValue::State> value;
  int lost = 0;  // attempts lost to dead workers
};

class Scheduler {
 public:
  Scheduler(int max_staleness, int max_attempts, Clock::time_point now);

  // Queues a step at the back. It counts as outstanding until it completes or fails.
  void push(std::shared_ptr<Step> step, Clock::time_point now);
  // Counts a step that fails at once (scheduled after shutdown).
  void push_failed(std::shared_ptr<Step> step, std::exception_ptr error);

  void add_worker(int index);
  // Drops a live worker. Its running step fails with `error` when given; otherwise it goes
  // back to the front of the queue, or fails with UnavailableError after max_attempts.
  void remove_worker(int index, Clock::time_point now, std::exception_ptr error = nullptr);
  int live_workers() const { return static_cast<int>(workers_.size()); }
  // Distinct worker indices that have been live at some time (they may have left since).
  int seen_workers() const { return static_cast<int>(seen_.size()); }

  // The next step for an idle worker allowed by the staleness rule, or null.
  std::shared_ptr<Step> take(int index);
  // Completes the worker's running step. IoError when `reply` names another step.
  void complete(int index, const ReplyMsg& reply);

  // Fails every queued step (not the running ones) with `error`.
  void fail_queued(std::exception_ptr error);
  // Fails everything left, queued or running (the coordinator is going away).
  void fail_all(std::exception_ptr error);

  // When waiting steps must fail for lack of workers: no worker is live and steps wait;
  // the clock starts when both became true.
  std::optional<Clock::time_point> no_worker_deadline(std::chrono::milliseconds timeout) const;

  int64_t outstanding() const { return outstanding_; }
  // The first step error since the last call that returned one (then forgotten).
  std::exception_ptr take_first_error();

  struct Counters {
    int64_t started = 0;
    int64_t finished = 0;
  };
  Counters counters(int index) const;
  int64_t min_finished() const;  // over live workers; 0 when none

 private:
  struct Worker {
    Counters counters;
    std::shared_ptr<Step> running;
  };
  void fail(const std::shared_ptr<Step>& step, std::exception_ptr error);
  void requeue_or_fail(int index, std::shared_ptr<Step> step);
  void note_waiting(Clock::time_point now);

  const int max_staleness_;
  const int max_attempts_;
  std::deque<std::shared_ptr<Step>> queue_;
  std::map<int, Worker> workers_;
  std::set<int> seen_;
  int64_t outstanding_ = 0;
  std::exception_ptr first_error_;
  Clock::time_point no_workers_since_;
  Clock::time_point waiting_since_;
};

// The exception a worker's error reply becomes: UnavailableError for kind "unavailable",
// chorus::Error otherwise; the message is "worker <i>: <message>".
std::exception_ptr step_error(int worker, const std::string& kind, const std::string& message);

}  // namespace chorus::ps::coordinator
