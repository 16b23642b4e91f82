// What chorus reads from Slurm to run a step (`srun -n 4 ./train`) without a launcher of its
// own: Slurm's compressed host lists, its tasks-per-node lists, and the port of a step's
// rendezvous store. read_job_env() (job_env.h) uses these; chorusrun uses them to take the
// hosts and slots of the allocation it runs in. docs/slurm.md says how it all fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::slurm {

// Expands a Slurm host list, as in SLURM_JOB_NODELIST or SLURM_STEP_NODELIST:
//   "node[1-3,5],gpu07" -> node1 node2 node3 node5 gpu07
//   "n[08-10]"          -> n08 n09 n10  (numbers are padded to the lower bound's width)
//   "r[1-2]n[1-2]"      -> r1n1 r1n2 r2n1 r2n2  (several brackets: every combination)
// Names keep Slurm's order (duplicates too). Host names may hold letters, digits, '-', '.'
// and '_'. Throws InvalidArgument naming `what` (the variable) and the fault: an empty list
// or name, an unclosed, nested or stray bracket, a range that is empty, descending or not
// numeric, or more than kMaxHosts names.
std::vector<std::string> expand_hostlist(const std::string& list,
                                         const std::string& what = "host list");
constexpr size_t kMaxHosts = 1 << 20;

// Expands a tasks-per-node list, as in SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE:
// "2(x3),1" -> 2 2 2 1. Every count must be a positive integer. Throws InvalidArgument
// naming `what` when malformed or longer than kMaxHosts.
std::vector<int> expand_tasks_per_node(const std::string& text,
                                       const std::string& what = "tasks per node");

// The rendezvous store's port of step `step_id` of job `job_id` when nothing else gives one:
//   kPortBase + (job_id * 97 + step_id) % kPortCount, i.e. within [20000, 29999].
// Below Linux's ephemeral range (32768-60999), so no outgoing connection holds it; the
// factor 97 keeps the steps of nearby jobs apart (distinct for job ids less than 103 apart
// and step ids less than 97 apart). Deterministic: every rank computes the same port.
constexpr int kPortBase = 20000;
constexpr int kPortCount = 10000;
uint16_t store_port(uint64_t job_id, uint64_t step_id);

// The numeric address `host` resolves to here (the first IPv4 address, else the first
// IPv6 one). Throws InvalidArgument naming `what` when it does not resolve.
std::string resolve_address(const std::string& host, const std::string& what);

// Whether a numeric address is a loopback one (127.0.0.0/8, ::1, ::ffff:127.x.y.z).
bool is_loopback_address(const std::string& address);

}  // namespace chorus::slurm
