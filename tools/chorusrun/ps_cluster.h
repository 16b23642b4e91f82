// A parameter-server cluster started by `chorusrun --ps K -np N`: one chief, N workers and K
// ps tasks, all running the same program. Each task learns its place from TF_CONFIG
// (tf.distribute's format, read by chorus::ps::ClusterSpec and read_job_env()), never from
// CHORUS_RANK, which would make chorus::init treat it as a rank of a collective job.
//
// Placement: the tasks take the slots in the order chief, ps 0..K-1, worker 0..N-1 (the
// same slot filling as ranks 0, 1, ... of a collective job), so the long-lived, stateful
// tasks land on the first host.
//
// Addresses: a task on this host listens on 127.0.0.1 (single-host cluster) or on the
// address the other hosts reach this one by (store_bind_endpoint()), at a port found free
// by binding port 0 just before the start. Another process may take that port in between:
// the task then fails to listen and the attempt fails (restartable). A remote task listens
// on its host name from -H at --ps-port-base + its position in the slot order.
#pragma once

#include <string>
#include <vector>

#include "hosts.h"
#include "launch.h"
#include "spawn.h"

namespace chorus::run {

struct PsTask {
  std::string role;  // "chief", "worker" or "ps"
  int index = 0;     // within its role
  Placement placement;
  std::string address;  // "host:port" the task listens on

  std::string label() const;     // "chief", "worker 1", "ps 0": output prefix, messages
  std::string log_name() const;  // "chief", "worker.1", "ps.0": --output-dir file names
};

// Every task of the cluster in slot order, with its address. REQUIRES: plan.options.ps_mode.
// Throws UsageError when no free port can be bound.
std::vector<PsTask> make_ps_cluster(const JobPlan& plan);

// {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type": ..., "index": ...}}
std::string tf_config_json(const std::vector<PsTask>& cluster, const PsTask& me);

// What a task gets besides the secret file and -x: TF_CONFIG, CHORUS_RESTART_COUNT (the
// attempt), CHORUS_LAUNCHER=tf_config (so stray launcher variables cannot win over
// TF_CONFIG in read_job_env()) and CHORUS_HOST_ID.
EnvVars ps_task_vars(const std::vector<PsTask>& cluster, const PsTask& me, int restart);

// The variables of a collective rank, which a task must not inherit from chorusrun.
const std::vector<std::string>& ps_unset_vars();

}  // namespace chorus::run
