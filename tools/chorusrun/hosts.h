// Hosts and slots (-H / --hostfile) and the placement of ranks on them.
#pragma once

#include <string>
#include <vector>

namespace chorus::run {

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "a:2,b,c:4" (a host without ":slots" has one slot). Throws UsageError when malformed.
std::vector<HostSlots> parse_host_list(const std::string& text);
// One host per line: "host", "host:4", "host slots=4"; '#' starts a comment.
std::vector<HostSlots> read_hostfile(const std::string& path);

// Whether `host` names this machine (localhost, a loopback 127.0.0.1/::1, or its hostname):
// such ranks are started directly instead of over ssh.
bool is_local_host(const std::string& host);
// Throws UsageError when the name does not resolve.
void check_resolves(const std::string& host);

struct Placement {
  int rank = 0;
  std::string host;
  bool local = true;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;  // index of the host among those that got ranks
  int cross_size = 1;
};

// Fills each host's slots in order (rank 0.. on the first host). With more ranks than slots
// it throws UsageError unless `oversubscribe`, which then deals the rest round-robin.
// `noun` names the processes in that message ("ranks", "tasks").
std::vector<Placement> place_ranks(const std::vector<HostSlots>& hosts, int np, bool oversubscribe,
                                   const char* noun = "ranks");

}  // namespace chorus::run
