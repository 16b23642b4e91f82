// Turning a parsed command line into running ranks: placement, environment of each rank,
// the secret, and the command that starts it (direct, ssh, or mpirun).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "hosts.h"
#include "options.h"
#include "relay.h"
#include "spawn.h"
#include "util/net.h"

namespace chorus::run {

struct JobPlan {
  Options options;
  std::vector<HostSlots> hosts;
  std::vector<Placement> placements;
  bool multi_host = false;  // some rank runs on another machine
  std::string program;      // resolved absolute path
  std::string cwd;
  std::string store_host;  // where ranks dial the launcher's store
  uint16_t store_port = 0;
  Secret secret;
  std::string secret_file;  // 0600 copy for local ranks, in a 0700 directory
  std::vector<int> cpus;    // what local workers are bound within (binding.h)
};

// Validates everything that can be checked before starting (UsageError otherwise).
JobPlan make_plan(const Options& options);

// Binding address of the launcher's store: 127.0.0.1 for single-host jobs, otherwise
// --store-address or this host's address on the route to the first remote host. Port 0
// unless --store-address names one. Also the address a parameter-server cluster's local
// tasks listen on in a multi-host cluster (the one the other hosts can reach).
net::Endpoint store_bind_endpoint(const JobPlan& plan);

// The job secret: CHORUS_SECRET / CHORUS_SECRET_FILE, else a fresh random one — but only for
// single-host jobs (UsageError otherwise). Writes the local copy into `private_dir`.
void prepare_secret(JobPlan& plan, const std::string& private_dir);

// The cpus the process at `p` is bound to: its share of plan.cpus when it runs on this host
// and chorusrun starts it itself; empty (not bound) otherwise.
std::vector<int> bound_cpus(const JobPlan& plan, const Placement& p);

// How one process on `p`'s host is started: locally, inheriting chorusrun's environment
// without the names in `unset` (and the secret variables), or through the remote shell with
// the launcher's CHORUS_ tunables except `unset`. Either way it gets `own`, the -x
// variables and the secret file.
SpawnSpec process_spec(const JobPlan& plan, const Placement& p, const EnvVars& own,
                       const std::vector<std::string>& unset);

// Appends a process's stdout and stderr relays: "[label] " lines on chorusrun's stdout and
// stderr, or both into --output-dir's <log_name>.log.
void add_relays(const JobPlan& plan, const std::string& label, const std::string& log_name,
                std::vector<std::unique_ptr<LineRelay>>& relays);

// Starts every rank of attempt `restart` (one mpirun with --mpi) and returns the children,
// with a stdout and a stderr relay per child appended to `relays`.
std::vector<Child> start_attempt(const JobPlan& plan, int restart,
                                 std::vector<std::unique_ptr<LineRelay>>& relays);

}  // namespace chorus::run
