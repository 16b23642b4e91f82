#include "ps_attempt.h"

#include <sys/wait.h>

#include <stdexcept>

namespace chorus::run {
namespace {

using Action = ExitDecision::Action;

bool exited_ok(const Child& c) { return WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0; }

}  // namespace

PsAttempt::PsAttempt(const JobPlan& plan, int restart)
    : plan_(plan), restart_(restart), cluster_(make_ps_cluster(plan)) {}

std::vector<Child> PsAttempt::start(std::vector<std::unique_ptr<LineRelay>>& relays) {
  if (plan_.options.verbose) show();
  std::vector<Child> children;
  for (const PsTask& task : cluster_) children.push_back(start_task(task, relays));
  return children;
}

void PsAttempt::install(SuperviseOptions& options) {
  options.decide = [this](const Child& c, const std::string& what) { return decide(c, what); };
  options.respawn = [this](const Child& c, std::vector<std::unique_ptr<LineRelay>>& relays) {
    return start_task(task_of(c), relays);
  };
}

ExitDecision PsAttempt::decide(const Child& child, const std::string& what) {
  const PsTask& task = task_of(child);
  bool ok = exited_ok(child);
  if (task.role == "chief") {
    if (ok) return {Action::kFinish, plan_.options.verbose ? what + "; stopping the cluster" : ""};
    return {Action::kFail, what + "; stopping the cluster"};
  }
  // Workers and ps tasks end on their own once the chief shuts the cluster down, possibly
  // a moment before the chief itself: that is no failure.
  if (ok) return {};
  if (task.role == "ps") return {Action::kFail, what + "; stopping the cluster"};
  return worker_failed(task, what);
}

// The chief reruns the lost worker's step elsewhere; a restarted worker rejoins.
ExitDecision PsAttempt::worker_failed(const PsTask& task, const std::string& what) {
  int allowed = plan_.options.worker_restarts;
  int& used = worker_restarts_[task.index];
  if (used < allowed) {
    ++used;
    return {Action::kRestart, what + "; restarting it (worker restart " + std::to_string(used) +
                                  " of " + std::to_string(allowed) + ")"};
  }
  if (++workers_lost_ == plan_.options.np) {
    return {Action::kFail, what + "; no worker is left (--worker-restarts " +
                               std::to_string(allowed) + " used up), stopping the cluster"};
  }
  return {Action::kContinue, what + "; the job continues without it (--worker-restarts " +
                                 std::to_string(allowed) + " used up)"};
}

Child PsAttempt::start_task(const PsTask& task, std::vector<std::unique_ptr<LineRelay>>& relays) {
  SpawnSpec spec =
      process_spec(plan_, task.placement, ps_task_vars(cluster_, task, restart_), ps_unset_vars());
  add_relays(plan_, task.label(), task.log_name(), relays);
  Child child = spawn(spec);
  child.label = task.label();
  child.host = task.placement.host;
  child.remote = !task.placement.local;
  return child;
}

const PsTask& PsAttempt::task_of(const Child& child) const {
  for (const PsTask& task : cluster_) {
    if (task.label() == child.label) return task;
  }
  throw std::logic_error("chorusrun: no cluster task is labelled '" + child.label + "'");
}

void PsAttempt::show() const {
  say("attempt " + std::to_string(restart_) + ": parameter-server cluster of " +
      std::to_string(cluster_.size()) + " tasks");
  for (const PsTask& t : cluster_) {
    const Placement& p = t.placement;
    say(t.label() + " on " + p.host + (p.local ? " (local)" : " (" + plan_.options.rsh + ")") +
        " listening on " + t.address + ": " + plan_.program);
  }
}

}  // namespace chorus::run
