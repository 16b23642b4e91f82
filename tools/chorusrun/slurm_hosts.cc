#include "slurm_hosts.h"

#include <initializer_list>

#include "chorus/error.h"
#include "options.h"
#include "rendezvous/slurm.h"
#include "util/env.h"

namespace chorus::run {
namespace {

const char* first_set(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (env_string(name)) return name;
  }
  return nullptr;
}

// Slurm's lists, with the library's InvalidArgument turned into chorusrun's bad input.
template <typename F>
auto usage_checked(F parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const InvalidArgument& e) {
    throw UsageError(std::string("in the Slurm allocation: ") + e.what());
  }
}

std::vector<int> slots_per_node(size_t nodes, std::string& source) {
  const char* var = first_set({"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"});
  if (!var) return std::vector<int>(nodes, 1);
  std::string text = *env_string(var);
  source += ", " + std::string(var) + "=" + text;
  auto slots = usage_checked([&] { return slurm::expand_tasks_per_node(text, var); });
  if (slots.size() != nodes) {
    throw UsageError(std::string("in the Slurm allocation: ") + var + "=" + text + " gives " +
                     std::to_string(slots.size()) + " node(s) but the node list names " +
                     std::to_string(nodes));
  }
  return slots;
}

}  // namespace

std::optional<SlurmAllocation> slurm_allocation() {
  auto job_id = env_string("SLURM_JOB_ID");
  const char* nodes_var = first_set({"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!job_id || !nodes_var) return std::nullopt;
  SlurmAllocation a;
  a.job_id = *job_id;
  std::string list = *env_string(nodes_var);
  a.source = std::string(nodes_var) + "=" + list;
  auto nodes = usage_checked([&] { return slurm::expand_hostlist(list, nodes_var); });
  std::vector<int> slots = slots_per_node(nodes.size(), a.source);
  for (size_t i = 0; i < nodes.size(); ++i) {
    a.hosts.push_back({nodes[i], slots[i]});
    a.slots += slots[i];
  }
  return a;
}

void check_fits(const SlurmAllocation& a, int np, bool oversubscribe, const char* noun) {
  if (np <= a.slots || oversubscribe) return;
  throw UsageError(std::to_string(np) + " " + noun + " do not fit in the " +
                   std::to_string(a.slots) + " task slot(s) of Slurm allocation " + a.job_id +
                   " (" + a.source + "): ask Slurm for more (salloc/sbatch -n " +
                   std::to_string(np) + "), or give hosts with -H, or pass --oversubscribe");
}

}  // namespace chorus::run
