#include "rendezvous/job_env.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <utility>

#include "chorus/error.h"
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

JobEnv read_slurm() {
  JobEnv env;
  env.source = "slurm";
  env.size = env_string("SLURM_NTASKS") ? required_int("SLURM_NTASKS", 1)
                                        : required_int("SLURM_NPROCS", 1);
  env.rank = required_int("SLURM_PROCID", 0);
  check_rank("SLURM_PROCID", env.rank, "SLURM_NTASKS", env.size);
  env.local_rank = optional_int("SLURM_LOCALID", 0, -1);
  env.cross_rank = optional_int("SLURM_NODEID", 0, -1);
  env.cross_size = optional_int("SLURM_NNODES", 1, -1);
  read_store(env);
  require_store(env,
                "Slurm does not provide one: set CHORUS_STORE_ADDR (a running store) or "
                "MASTER_ADDR and MASTER_PORT (rank 0 hosts it)");
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
    {"chorus", "CHORUS_RANK", read_chorus}, {"openmpi", "OMPI_COMM_WORLD_RANK", read_openmpi},
    {"torchrun", "RANK", read_torchrun},    {"tf_config", "TF_CONFIG", read_tf_config},
    {"slurm", "SLURM_PROCID", read_slurm},  {"single", nullptr, read_single},
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
  return kSources[5];
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
