// The cluster of a parameter-server job: a chief (the coordinator), workers and ps tasks,
// each with a "host:port" it listens on, plus this process's role and index. Read from
// TF_CONFIG (tf.distribute's format), from TF1-style flags (--ps_hosts, --worker_hosts,
// --chief_host, --job_name, --task_index), or from what `chorusrun --ps K` exports.
//
// Errors: InvalidArgument naming the source and what is wrong ("TF_CONFIG: no 'ps' tasks
// in cluster: ParameterServerStrategy needs at least one", "task.index 3 is not below the
// number of worker tasks (2)", ...). Nothing is contacted while parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chorus/store.h"

namespace chorus::ps {

enum class Role { kChief, kWorker, kPs };
const char* role_name(Role role);  // "chief", "worker", "ps"

struct ClusterSpec {
  std::string chief;                 // "host:port" of the coordinator
  std::vector<std::string> workers;  // at least one
  std::vector<std::string> ps;       // at least one
  Role role = Role::kChief;          // this process
  int task_index = 0;                // index within its role (0 for the chief)

  // TF_CONFIG text. REQUIRES: a chief, >= 1 worker, >= 1 ps, task inside its role.
  static ClusterSpec from_tf_config(const std::string& json);
  // TF1 flags: comma-separated "host:port" lists; job_name "chief", "worker" or "ps".
  static ClusterSpec from_flags(const std::string& ps_hosts, const std::string& worker_hosts,
                                const std::string& chief_host, const std::string& job_name,
                                int task_index);
  // TF_CONFIG from the environment; InvalidArgument when it is unset.
  static ClusterSpec from_env();

  int num_workers() const { return static_cast<int>(workers.size()); }
  int num_ps() const { return static_cast<int>(ps.size()); }
  // This task's own address.
  const std::string& address() const;
  // Throws InvalidArgument unless the spec is complete and consistent (used by every
  // constructor above; callers building a spec by hand call it themselves).
  void validate() const;
};

// The job secret for the cluster: CHORUS_SECRET / CHORUS_SECRET_FILE when set. Without
// one, a cluster whose addresses are all loopback uses a secret derived per user and chief
// address from a 0600 file in the runtime directory, created by whichever task comes
// first (so a local job started by hand works); any other cluster is InvalidArgument.
Secret cluster_secret(const ClusterSpec& spec);

// "host:port" -> (host, port). InvalidArgument naming `what` on a malformed address.
std::pair<std::string, uint16_t> split_address(const std::string& address, const char* what);

}  // namespace chorus::ps
