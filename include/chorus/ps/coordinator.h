// The coordinator (tf.distribute's ClusterCoordinator) and the worker side of it. The
// chief schedules steps; each goes to an idle worker, which runs a step function compiled
// into the same program (the task names it and carries plain bytes: no code crosses the
// wire) and sends back the result bytes.
//
// Fault tolerance: when a worker's connection drops (the process died, its host went away)
// the steps it held are put back at the front of the queue and run on another worker
// (at-least-once). A worker may (re)join at any time. A step whose function threw on the
// worker is not retried: its RemoteValue rethrows the error with the worker's message;
// an UnavailableError there (a ps is gone) stays an UnavailableError.
//
// Bounded staleness: with max_staleness S >= 0, a step goes to worker w only while w's
// started steps exceed the slowest live worker's finished steps by at most S (counted
// before this dispatch, so S = 0 runs the workers in lockstep rounds). A (re)joining
// worker's counters start at that minimum. docs/coordinator.md has the exact rule.
//
// Liveness: the coordinator pings each worker; a worker answers from a thread of its own,
// so a step that runs for minutes is not mistaken for a dead worker, while a worker that
// sends nothing for heartbeat_timeout (its host vanished, it was stopped) is dropped.
//
// Thread safety: Coordinator and RemoteValue members may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "chorus/store.h"

namespace chorus::ps {

struct CoordinatorOptions {
  int max_staleness = -1;  // < 0: unbounded
  // A step fails with UnavailableError after this many attempts lost to dead workers.
  int max_attempts = 5;
  // join() / RemoteValue::get() fail with UnavailableError when no worker has been
  // connected for this long while steps wait. 0: CHORUS_TIMEOUT_SECONDS.
  std::chrono::milliseconds no_worker_timeout{0};
  std::chrono::milliseconds handshake_timeout{10000};
  // Connections at most, workers and those still in their handshake together; further
  // ones are refused (closed at once, logged), so no flood of sockets costs a thread each.
  int max_clients = 256;
  // A worker (or the coordinator, seen from a worker) that sends nothing for this long is
  // dead. Pings go out every heartbeat_timeout / 4 (at most every 5 s).
  // 0: CHORUS_TIMEOUT_SECONDS.
  std::chrono::milliseconds heartbeat_timeout{0};
};

class RemoteValue {
 public:
  RemoteValue() = default;
  // A default-constructed RemoteValue is empty: its members throw InvalidArgument.
  bool ready() const;
  // Waits for the result. Throws the step's error (see above), UnavailableError when no
  // worker could run it (max_attempts lost, no_worker_timeout, coordinator shut down).
  // No deadline of its own: every step ends (result, error, or one of those failures).
  const std::string& get() const;
  int worker() const;    // the worker that produced the result (-1 before)
  int attempts() const;  // dispatches so far

  struct State;
  explicit RemoteValue(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

class Coordinator {
 public:
  // Listens on host:port (0: any) for workers (purpose "coordinator").
  Coordinator(const std::string& host, uint16_t port, Secret secret,
              CoordinatorOptions options = {});
  ~Coordinator();  // shutdown_workers(), then closes everything
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  uint16_t port() const;
  // Queues `function(argument)` for the next idle worker. InvalidArgument when the name is
  // empty or over 256 bytes or the argument over 64 MiB. After shutdown_workers() the
  // value fails at once with UnavailableError.
  RemoteValue schedule(const std::string& function, const std::string& argument);
  // Waits until every step scheduled so far (and any scheduled meanwhile) has finished;
  // then rethrows the first step error since the last join() that threw, once (TF's
  // semantics: an error is raised by one join, the next join starts clean).
  void join();
  // Waits until `n` workers are connected (TimeoutError after `timeout`).
  void wait_for_workers(int n, std::chrono::milliseconds timeout);
  int num_live_workers() const;
  // Waits until `n` distinct workers have connected at least once (they may have left
  // since); false after `timeout`.
  bool wait_for_workers_seen(int n, std::chrono::milliseconds timeout);
  int num_workers_seen() const;
  // Tells every connected worker to return from serve_coordinator(); later joiners too.
  // Steps still queued fail with UnavailableError; steps running finish first (a worker
  // sends its result before it returns). Does not wait.
  void shutdown_workers();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// What a worker runs for one step: function name and argument in, result bytes out.
using StepHandler =
    std::function<std::string(const std::string& function, const std::string& argument)>;

// A worker's life: connects to the coordinator at `address` (retrying while it starts, up
// to `connect_timeout`), announces `worker_index`, runs steps one at a time until the
// coordinator shuts workers down, then returns. Throws IoError / TimeoutError when the
// coordinator cannot be reached or goes away without a shutdown, AuthError on a wrong
// secret, InvalidArgument when a live worker already holds `worker_index`.
// A handler's exception is sent back as the step's error (kind "unavailable" for
// chorus::UnavailableError, "error" otherwise) and the worker goes on serving.
void serve_coordinator(const std::string& address, int worker_index, const Secret& secret,
                       const StepHandler& handler,
                       std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(0));

}  // namespace chorus::ps
