// One attempt of a parameter-server cluster (chorusrun --ps K): starts every task and
// decides what each exit means (the Supervisor's ExitPolicy):
//   - the chief exits 0: the job succeeded; the others get the grace period to end on their
//     own (the chief normally shuts the cluster down), then SIGTERM, then SIGKILL;
//   - a worker fails (non-zero exit or signal): it is restarted alone with the same
//     TF_CONFIG, up to --worker-restarts times per worker and attempt; after that the job
//     goes on without it — unless no worker is left, which fails the attempt;
//   - the chief or a ps task fails: the attempt fails (--max-restarts may start a new one);
//   - a worker or ps task exiting 0 before the chief changes nothing.
//
// Thread safety: used from chorusrun's one supervising thread.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "launch.h"
#include "ps_cluster.h"
#include "relay.h"
#include "supervise.h"

namespace chorus::run {

class PsAttempt {
 public:
  // Chooses the cluster's addresses (fresh local ports for every attempt).
  PsAttempt(const JobPlan& plan, int restart);

  // Starts every task in slot order, appending two relays per task to `relays`.
  std::vector<Child> start(std::vector<std::unique_ptr<LineRelay>>& relays);

  // Points options.decide and options.respawn at this attempt.
  // REQUIRES: this object outlives the Supervisor that uses `options`.
  void install(SuperviseOptions& options);

  const std::vector<PsTask>& cluster() const { return cluster_; }

 private:
  ExitDecision decide(const Child& child, const std::string& what);
  ExitDecision worker_failed(const PsTask& task, const std::string& what);
  Child start_task(const PsTask& task, std::vector<std::unique_ptr<LineRelay>>& relays);
  const PsTask& task_of(const Child& child) const;
  void show() const;

  const JobPlan& plan_;
  int restart_;
  std::vector<PsTask> cluster_;
  std::map<int, int> worker_restarts_;  // worker index -> restarts used in this attempt
  int workers_lost_ = 0;                // failed with no restart left
};

}  // namespace chorus::run
