// chorusrun's command line. Parsing never starts anything: bad input becomes a UsageError,
// which main() prints with the usage hint and turns into exit code 2.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "binding.h"

namespace chorus::run {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  bool show_version = false;  // --version: print it and start nothing
  int np = 0;
  std::string host_list;           // -H a:2,b:2
  std::string hostfile;            // --hostfile FILE
  bool oversubscribe = false;      // allow more ranks than slots
  bool mpi = false;                // start through OpenMPI's mpirun
  BindTo bind_to = BindTo::kAuto;  // --bind-to: local workers' cpus (binding.h)
  bool verbose = false;
  std::string output_dir;    // one log per rank instead of prefixed lines
  double grace_seconds = 5;  // SIGTERM -> SIGKILL
  double start_timeout = 0;  // seconds for every rank to join the store; 0: no limit
  int max_restarts = 0;
  // Parameter-server mode (--ps K): 1 chief + np workers + K ps tasks, each told its place
  // through TF_CONFIG instead of CHORUS_RANK (see ps_cluster.h).
  bool ps_mode = false;
  int ps = 0;                        // K, the number of ps tasks
  int ps_port_base = 29500;          // remote tasks listen on base + their position in the cluster
  int worker_restarts = 3;           // per worker and attempt: restarts of that worker alone
  std::string store_address;         // address the launcher's store binds and ranks dial
  std::string rsh = "ssh";           // remote shell (tests substitute a local one)
  std::vector<std::string> exports;  // -x NAME[=VALUE]: also forwarded to remote ranks
  std::string dashboard;             // --dashboard [ADDR:]PORT: serve the job's page
  double dashboard_linger = 0;       // seconds the page stays up after the job ended
  double dashboard_stall = 10;       // a rank without progress this long shows as stalled
  // Elastic mode (--min-np/--max-np/--host-discovery-script; see elastic.h): workers may
  // leave and join while the job runs. min_np == 0: not elastic.
  int min_np = 0;
  int max_np = 0;                    // 0: as many as the hosts have slots
  std::string discovery_script;      // prints "host:slots" lines; polled
  double discovery_interval = 1;     // seconds between runs of the script
  double elastic_timeout = 600;      // seconds the job may stay below min_np
  double blacklist_cooldown = 0;     // seconds a failed slot stays unused; 0: for good
  std::vector<std::string> program;  // program and its arguments
  bool elastic() const { return min_np > 0; }
};

// argv[0] is skipped. Throws UsageError naming the offending option or value. --version
// (before the program) returns at once with show_version set and nothing else checked.
Options parse_options(int argc, char** argv);

const char* usage_text();

}  // namespace chorus::run
