// chorusrun inside a Slurm allocation (salloc, sbatch): without -H or --hostfile the ranks
// go to the allocation's nodes, as many per node as Slurm gave it task slots, so that a job
// asks Slurm once (`salloc -N 2 -n 8 chorusrun -np 8 ./train`). docs/slurm.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hosts.h"

namespace chorus::run {

struct SlurmAllocation {
  std::string job_id;
  std::vector<HostSlots> hosts;  // the allocation's nodes and their task slots
  std::string source;            // the variables it came from, for messages
  int slots = 0;                 // the sum of the hosts' slots
};

// The allocation described by SLURM_JOB_ID and SLURM_JOB_NODELIST (or SLURM_NODELIST), with
// the slots of SLURM_TASKS_PER_NODE, else SLURM_JOB_CPUS_PER_NODE, else one per node;
// nullopt outside an allocation. UsageError when the variables are malformed or disagree.
std::optional<SlurmAllocation> slurm_allocation();

// UsageError naming the allocation and what to ask Slurm for when `np` processes do not
// fit its slots and `oversubscribe` is off. `noun` names the processes ("ranks", "tasks").
void check_fits(const SlurmAllocation& allocation, int np, bool oversubscribe, const char* noun);

}  // namespace chorus::run
