// An elastic job (--min-np A --max-np B [--host-discovery-script S]): chorusrun decides
// which workers make up the job and publishes each membership as a round in its store
// (rendezvous/elastic_rounds.h); the workers re-form their world in the new round without
// restarting (chorus/elastic.h). docs/elastic.md tells the whole story.
//
//   - A worker that fails leaves the job: the survivors get a round without it at once.
//     Its slot stays unused (for good, or for --blacklist-cooldown seconds); a host with 3
//     failures within that time is blacklisted, no new worker goes there meanwhile.
//   - Free slots (from -H / --hostfile, or from the discovery script, run every
//     --discovery-interval) get new workers, up to --max-np; they are in the next round,
//     which the running workers join at their next commit.
//   - Below --min-np the job waits up to --elastic-timeout for slots, then fails naming
//     how many are missing.
//   - A worker that exits 0 has finished; the job succeeds when every worker has ended and
//     it was not stopped.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "hosts.h"
#include "launch.h"
#include "supervise.h"

namespace chorus::run {

// Runs the discovery script (through /bin/sh -c) and parses its "host:slots" lines
// (hosts.h's -H syntax, one host per line; blank lines and '#' comments skipped). Throws
// UsageError when it fails, prints garbage or takes longer than `timeout`.
std::vector<HostSlots> discover_hosts(const std::string& script, std::chrono::milliseconds timeout);

class ElasticJob {
 public:
  // `store` is the launcher's store (the rounds go there); both must outlive this object.
  ElasticJob(const JobPlan& plan, Store& store);

  // Sets `so`'s exit policy and tick to this job's.
  void install(SuperviseOptions& so);
  // Starts -np workers and publishes the first round.
  std::vector<Child> start(std::vector<std::unique_ptr<LineRelay>>& relays);

 private:
  using Clock = std::chrono::steady_clock;
  struct Worker {
    std::string id;
    std::string host;
    pid_t pid = -1;
  };

  ExitDecision on_exit(const Child& child, const std::string& what);
  TickResult tick(std::vector<std::unique_ptr<LineRelay>>& relays);
  void discover();
  // Starts workers on free slots up to --max-np; how many it started.
  std::vector<Child> fill(std::vector<std::unique_ptr<LineRelay>>& relays);
  Child start_worker(const std::string& host, std::vector<std::unique_ptr<LineRelay>>& relays);
  int free_slots(const std::string& host);
  int recent_failures(const std::string& host);
  void publish(const std::string& why);
  std::string missing_slots_message();

  const JobPlan& plan_;
  Store& store_;
  std::vector<HostSlots> hosts_;  // the latest known hosts and slots, in order
  std::vector<Worker> live_;      // in rank order: the order they joined
  std::map<std::string, std::vector<Clock::time_point>> failures_;  // per host
  int next_id_ = 0;
  int64_t round_ = -1;
  bool finishing_ = false;  // a worker exited 0: no new workers from now on
  bool below_min_ = false;
  Clock::time_point below_min_since_;
  Clock::time_point next_discovery_;
};

}  // namespace chorus::run
