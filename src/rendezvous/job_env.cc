#include "rendezvous/job_env.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "chorus/error.h"
#include "rendezvous/slurm.h"
#include "rendezvous/tf_config.h"
#include "util/env.h"

namespace chorus {
namespace {

// ---- small checked readers ------------------------------------------------------------

int required_int(const char* name, int lo) {
  auto value = env_int(name);
  CHORUS_CHECK_ARG(value.has_value(), "environment variable ", name, " is not set");
  CHORUS_CHECK_ARG(*value >= lo && *value <= INT32_MAX, "environment variable ", name, "=", *value,
                   " is out of range (must be >= ", lo, ")");
  return static_cast<int>(*value);
}

int optional_int(const char* name, int lo, int fallback) {
  if (!env_string(name)) return fallback;
  return required_int(name, lo);
}

void check_rank(const char* rank_name, int rank, const char* size_name, int size) {
  CHORUS_CHECK_ARG(rank < size, "environment variable ", rank_name, "=", rank, " is not below ",
                   size_name, "=", size);
}

// local_rank/local_size (or cross_*) must both be known or both unknown, and consistent.
void check_pair(const char* rank_name, int rank, const char* size_name, int size) {
  if (rank < 0 || size < 0) return;
  check_rank(rank_name, rank, size_name, size);
}

net::Endpoint parse_endpoint(const std::string& text, const char* from) {
  try {
    return net::Endpoint::parse(text);
  } catch (const InvalidArgument& e) {
    CHORUS_THROW(InvalidArgument, from, ": ", e.what());
  }
}

// CHORUS_STORE_ADDR: a store someone else hosts. MASTER_ADDR/MASTER_PORT: rank 0 hosts it.
// `port_offset` moves off a port that the launcher's own store already uses (torchrun).
bool read_store(JobEnv& env, int port_offset = 0) {
  if (auto addr = env_string("CHORUS_STORE_ADDR")) {
    env.store = parse_endpoint(*addr, "CHORUS_STORE_ADDR");
    env.rank0_hosts_store = false;
    return true;
  }
  auto master = env_string("MASTER_ADDR");
  auto port = env_string("MASTER_PORT");
  if (!master && !port) return false;
  CHORUS_CHECK_ARG(master && port, "MASTER_ADDR and MASTER_PORT must be set together");
  int p = required_int("MASTER_PORT", 1) + port_offset;
  CHORUS_CHECK_ARG(p <= 65535, "environment variable MASTER_PORT=", *port, " is out of range");
  env.store = net::Endpoint{*master, static_cast<uint16_t>(p)};
  env.rank0_hosts_store = true;
  return true;
}

void require_store(const JobEnv& env, const char* hint) {
  CHORUS_CHECK_ARG(env.store || env.size == 1, "a ", env.source, " job of ", env.size,
                   " ranks needs the rendezvous store's address: ", hint);
}

// ---- one reader per launcher ------------------------------------------------------------

JobEnv read_chorus() {
  JobEnv env;
  env.source = "chorus";
  env.size = required_int("CHORUS_SIZE", 1);
  env.rank = required_int("CHORUS_RANK", 0);
  check_rank("CHORUS_RANK", env.rank, "CHORUS_SIZE", env.size);
  env.local_rank = optional_int("CHORUS_LOCAL_RANK", 0, -1);
  env.local_size = optional_int("CHORUS_LOCAL_SIZE", 1, -1);
  env.cross_rank = optional_int("CHORUS_CROSS_RANK", 0, -1);
  env.cross_size = optional_int("CHORUS_CROSS_SIZE", 1, -1);
  read_store(env);
  require_store(env, "set CHORUS_STORE_ADDR=host:port");
  return env;
}

JobEnv read_elastic() {
  JobEnv env;
  env.source = "elastic";
  env.elastic_id = env_string("CHORUS_ELASTIC_ID").value_or("");
  CHORUS_CHECK_ARG(
      !env.elastic_id.empty() && env.elastic_id.find_first_of(" \t\n/") == std::string::npos,
      "environment variable CHORUS_ELASTIC_ID='", env.elastic_id,
      "' must be a non-empty word without '/'");
  CHORUS_CHECK_ARG(read_store(env) && !env.rank0_hosts_store,
                   "an elastic worker needs CHORUS_STORE_ADDR (the launcher's store)");
  return env;
}

JobEnv read_openmpi() {
  JobEnv env;
  env.source = "openmpi";
  env.size = required_int("OMPI_COMM_WORLD_SIZE", 1);
  env.rank = required_int("OMPI_COMM_WORLD_RANK", 0);
  check_rank("OMPI_COMM_WORLD_RANK", env.rank, "OMPI_COMM_WORLD_SIZE", env.size);
  env.local_rank = optional_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, -1);
  env.local_size = optional_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, -1);
  // Without an address rank 0 hosts the store and tells the others through MPI.
  env.meet_through_mpi = !read_store(env) && env.size > 1;
  return env;
}

JobEnv read_torchrun() {
  JobEnv env;
  env.source = "torchrun";
  env.size = required_int("WORLD_SIZE", 1);
  env.rank = required_int("RANK", 0);
  check_rank("RANK", env.rank, "WORLD_SIZE", env.size);
  env.local_rank = optional_int("LOCAL_RANK", 0, -1);
  env.local_size = optional_int("LOCAL_WORLD_SIZE", 1, -1);
  env.cross_rank = optional_int("GROUP_RANK", 0, -1);
  env.cross_size = optional_int("GROUP_WORLD_SIZE", 1, -1);
  // torchrun's agent serves its own (PyTorch) store on MASTER_PORT; ours takes the next one.
  auto agent_store = env_string("TORCHELASTIC_USE_AGENT_STORE");
  bool port_taken =
      agent_store && (*agent_store == "True" || *agent_store == "true" || *agent_store == "1");
  read_store(env, port_taken ? 1 : 0);
  require_store(env, "set MASTER_ADDR and MASTER_PORT");
  if (!env_string("CHORUS_RESTART_COUNT")) {
    env.restart_count = optional_int("TORCHELASTIC_RESTART_COUNT", 0, 0);
  }
  return env;
}

JobEnv read_single() {
  JobEnv env;
  env.source = "single";
  env.local_rank = 0;
  env.local_size = 1;
  env.cross_rank = 0;
  env.cross_size = 1;
  read_store(env);
  return env;
}

// ---- Slurm ---------------------------------------------------------------------------------

// The step as srun describes it: its nodes and how many of its tasks run on each.
struct SlurmStep {
  std::string id;                  // "<job>.<step>"
  std::vector<std::string> nodes;  // empty when no node list is set
  const char* nodes_var = nullptr;
  bool step_nodes = false;  // `nodes` are the step's own (SLURM_STEP_NODELIST), not the job's
  std::vector<int> tasks;   // per node; empty when unknown
  const char* tasks_var = nullptr;
};

const char* first_set(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (env_string(name)) return name;
  }
  return nullptr;
}

uint32_t slurm_id(const char* name) {
  auto value = env_int(name);
  CHORUS_CHECK_ARG(value.has_value(), "environment variable ", name, " is not set");
  CHORUS_CHECK_ARG(*value >= 0 && *value <= UINT32_MAX, "environment variable ", name, "=", *value,
                   " is out of range (Slurm ids are 32-bit: 0 to ", UINT32_MAX, ")");
  return static_cast<uint32_t>(*value);
}

SlurmStep read_slurm_step(const char* step_var) {
  SlurmStep step;
  step.id = std::to_string(slurm_id("SLURM_JOB_ID")) + "." + std::to_string(slurm_id(step_var));
  // The job's list names the allocation's nodes, a superset of the step's: only a fallback.
  step.nodes_var = first_set({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (step.nodes_var) {
    step.nodes = slurm::expand_hostlist(*env_string(step.nodes_var), step.nodes_var);
    step.step_nodes = std::string(step.nodes_var) == "SLURM_STEP_NODELIST";
  }
  step.tasks_var = first_set({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (step.tasks_var) {
    step.tasks = slurm::expand_tasks_per_node(*env_string(step.tasks_var), step.tasks_var);
  }
  return step;
}

// The step's own layout must agree with SLURM_NTASKS: a task count larger than the task
// slots of the step's nodes means this process would wait for ranks that never start.
void check_slurm_layout(JobEnv& env, const SlurmStep& step) {
  if (step.tasks.empty()) return;
  if (step.step_nodes) {
    CHORUS_CHECK_ARG(step.tasks.size() == step.nodes.size(), step.tasks_var, " gives ",
                     step.tasks.size(), " node(s) but SLURM_STEP_NODELIST names ",
                     step.nodes.size());
  }
  long total = 0;
  for (int t : step.tasks) total += t;
  const std::string given = *env_string(step.tasks_var);
  CHORUS_CHECK_ARG(total >= env.size, "the Slurm step has ", total, " task slot(s) (",
                   step.tasks_var, "=", given, ") but SLURM_NTASKS=", env.size,
                   ": start it with srun -n ", env.size, " inside an allocation of at least ",
                   env.size, " tasks");
  if (env.cross_rank >= 0 && env.cross_rank < static_cast<int>(step.tasks.size())) {
    env.local_size = step.tasks[env.cross_rank];
  }
}

uint16_t slurm_store_port(const char* step_var) {
  for (const char* name : {"CHORUS_STORE_PORT", "MASTER_PORT"}) {
    if (env_string(name)) {
      int port = required_int(name, 1);
      CHORUS_CHECK_ARG(port <= 65535, "environment variable ", name, "=", port, " is out of range");
      return static_cast<uint16_t>(port);
    }
  }
  return slurm::store_port(slurm_id("SLURM_JOB_ID"), slurm_id(step_var));
}

// The address of rank 0's node, where it hosts the store. A name that resolves to loopback
// (Debian maps a host's own name to 127.0.1.1) works only when every rank is on that node.
std::string slurm_store_host(const JobEnv& env, const SlurmStep& step) {
  if (auto master = env_string("MASTER_ADDR")) return *master;
  CHORUS_CHECK_ARG(!step.nodes.empty(), "a Slurm step of ", env.size,
                   " tasks needs its node list to find rank 0: SLURM_STEP_NODELIST is not set "
                   "(set MASTER_ADDR to rank 0's host)");
  if (env.cross_size == 1) return "127.0.0.1";
  const std::string& first = step.nodes[0];
  auto my_node = env_string("SLURMD_NODENAME");
  CHORUS_CHECK_ARG(env.rank != 0 || !my_node || *my_node == first, "rank 0 runs on node ",
                   my_node.value_or(""), " but the first node of ", step.nodes_var, " is ", first,
                   " (a custom task distribution?): set MASTER_ADDR to the address of ",
                   my_node.value_or(""));
  std::string address = slurm::resolve_address(
      first, std::string("Slurm node (rank 0's, the first in ") + step.nodes_var + ")");
  CHORUS_CHECK_ARG(!slurm::is_loopback_address(address), "Slurm node ", first,
                   " (rank 0's) resolves to ", address, ", a loopback address, but the step spans ",
                   env.cross_size, " nodes: fix the name's entry in /etc/hosts, or set ",
                   "MASTER_ADDR to an address of ", first, " that every node reaches");
  return address;
}

JobEnv read_slurm() {
  // srun sets the step id; a batch script or salloc's shell has Slurm's variables but none:
  // a program started there directly is a job of one process.
  const char* step_var = first_set({"SLURM_STEP_ID", "SLURM_STEPID"});
  if (!step_var) return read_single();
  JobEnv env;
  env.source = "slurm";
  env.size = env_string("SLURM_NTASKS") ? required_int("SLURM_NTASKS", 1)
                                        : required_int("SLURM_NPROCS", 1);
  env.rank = required_int("SLURM_PROCID", 0);
  check_rank("SLURM_PROCID", env.rank, "SLURM_NTASKS", env.size);
  env.local_rank = optional_int("SLURM_LOCALID", 0, -1);
  env.cross_rank = optional_int("SLURM_NODEID", 0, -1);
  SlurmStep step = read_slurm_step(step_var);
  env.cross_size =
      step.step_nodes ? static_cast<int>(step.nodes.size()) : optional_int("SLURM_NNODES", 1, -1);
  check_slurm_layout(env, step);
  env.job_id = "slurm-" + step.id;
  if (env_string("CHORUS_STORE_ADDR") || env.size == 1) {
    read_store(env);
    return env;
  }
  env.store = net::Endpoint{slurm_store_host(env, step), slurm_store_port(step_var)};
  env.rank0_hosts_store = true;
  return env;
}

// ---- TF_CONFIG ----------------------------------------------------------------------------

// The cluster's tasks in rank order: chief, workers, ps.
std::vector<std::pair<std::string, int>> tf_rank_order(const tf_config::Config& config) {
  std::vector<std::pair<std::string, int>> order;
  for (const char* role : {"chief", "worker", "ps"}) {
    auto it = config.cluster.find(role);
    if (it == config.cluster.end()) continue;
    for (size_t i = 0; i < it->second.size(); ++i) order.emplace_back(role, static_cast<int>(i));
  }
  return order;
}

std::string tf_host(const tf_config::Config& config, const std::pair<std::string, int>& task) {
  return parse_endpoint(config.cluster.at(task.first)[task.second], "TF_CONFIG").host;
}

// local/cross rank from the hosts named in the cluster (same host name = same machine).
void tf_placement(const tf_config::Config& config, JobEnv& env) {
  auto order = tf_rank_order(config);
  std::string my_host = tf_host(config, order[env.rank]);
  std::vector<std::string> hosts;
  env.local_rank = 0;
  env.local_size = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    std::string host = tf_host(config, order[r]);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    if (host != my_host) continue;
    if (static_cast<int>(r) < env.rank) ++env.local_rank;
    ++env.local_size;
  }
  env.cross_size = static_cast<int>(hosts.size());
  env.cross_rank = static_cast<int>(std::find(hosts.begin(), hosts.end(), my_host) - hosts.begin());
}

JobEnv read_tf_config() {
  tf_config::Config config = tf_config::parse(*env_string("TF_CONFIG"));
  JobEnv env;
  env.source = "tf_config";
  env.role = config.task_type;
  env.task_index = config.task_index;
  env.cluster = config.cluster;
  if (config.task_type == "evaluator") {  // evaluates checkpoints on its own
    env.local_rank = env.cross_rank = 0;
    env.local_size = env.cross_size = 1;
    return env;
  }
  auto order = tf_rank_order(config);
  CHORUS_CHECK_ARG(!order.empty(), "TF_CONFIG: cluster has no chief, worker or ps task");
  env.size = static_cast<int>(order.size());
  auto me =
      std::find(order.begin(), order.end(), std::make_pair(config.task_type, config.task_index));
  CHORUS_CHECK_ARG(me != order.end(), "TF_CONFIG: task {type: '", config.task_type,
                   "', index: ", config.task_index, "} is not in the cluster");
  env.rank = static_cast<int>(me - order.begin());
  tf_placement(config, env);
  if (!read_store(env)) {
    env.store = parse_endpoint(config.cluster.at(order[0].first)[0], "TF_CONFIG");
    env.rank0_hosts_store = true;
  }
  return env;
}

// ---- choosing the source ------------------------------------------------------------------

struct Source {
  const char* name;
  const char* marker;  // nullptr: always applies
  JobEnv (*read)();
};

const Source kSources[] = {
    {"elastic", "CHORUS_ELASTIC_ID", read_elastic},
    {"chorus", "CHORUS_RANK", read_chorus},
    {"openmpi", "OMPI_COMM_WORLD_RANK", read_openmpi},
    {"torchrun", "RANK", read_torchrun},
    {"tf_config", "TF_CONFIG", read_tf_config},
    {"slurm", "SLURM_PROCID", read_slurm},
    {"single", nullptr, read_single},
};

const Source& choose_source() {
  if (auto forced = env_string("CHORUS_LAUNCHER")) {
    for (const Source& s : kSources) {
      if (*forced == s.name) return s;
    }
    CHORUS_THROW(InvalidArgument, "environment variable CHORUS_LAUNCHER='", *forced,
                 "' is not one of chorus, openmpi, torchrun, tf_config, slurm, single");
  }
  for (const Source& s : kSources) {
    if (s.marker == nullptr || env_string(s.marker)) return s;
  }
  return kSources[6];
}

}  // namespace

JobEnv read_job_env() {
  JobEnv env = choose_source().read();
  check_pair("local rank", env.local_rank, "local size", env.local_size);
  check_pair("cross rank", env.cross_rank, "cross size", env.cross_size);
  CHORUS_CHECK_ARG(env.local_size <= env.size, "local size ", env.local_size,
                   " is larger than the job's size ", env.size, " (", env.source, ")");
  if (env_string("CHORUS_RESTART_COUNT")) {
    env.restart_count = required_int("CHORUS_RESTART_COUNT", 0);
  }
  env.secret = Secret::from_env();
  return env;
}

}  // namespace chorus
