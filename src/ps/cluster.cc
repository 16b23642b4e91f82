// ClusterSpec: TF_CONFIG (through the rendezvous TF_CONFIG parser), TF1 flags, checks.
// Every error is InvalidArgument naming its source ("TF_CONFIG: ...", "--ps_hosts: ...")
// so the user knows which of the several ways of describing a cluster to fix.
#include "chorus/ps/cluster.h"

#include <map>
#include <set>

#include "chorus/error.h"
#include "rendezvous/tf_config.h"
#include "util/env.h"
#include "util/net.h"

namespace chorus::ps {
namespace {

std::vector<std::string> split_list(const std::string& text, const char* flag) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    CHORUS_CHECK_ARG(!item.empty(), flag, ": empty address in '", text, "'");
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Role parse_role(const std::string& name, const std::string& source) {
  if (name == "chief") return Role::kChief;
  if (name == "worker") return Role::kWorker;
  if (name == "ps") return Role::kPs;
  CHORUS_THROW(InvalidArgument, source, ": '", name,
               "' is not a task of a parameter-server cluster (expected chief, worker or ps)");
}

const std::vector<std::string>* role_list(const ClusterSpec& spec, Role role) {
  if (role == Role::kWorker) return &spec.workers;
  if (role == Role::kPs) return &spec.ps;
  return nullptr;
}

// The checks behind validate(), with the source in every message.
void check_spec(const ClusterSpec& spec, const std::string& source) {
  CHORUS_CHECK_ARG(!spec.chief.empty(), source,
                   ": no 'chief' task: ParameterServerStrategy needs a chief (the coordinator)");
  CHORUS_CHECK_ARG(!spec.workers.empty(), source,
                   ": no 'worker' tasks: ParameterServerStrategy needs at least one 'worker' task");
  CHORUS_CHECK_ARG(!spec.ps.empty(), source,
                   ": no 'ps' tasks: ParameterServerStrategy needs at least one 'ps' task");
  const auto* list = role_list(spec, spec.role);
  int count = list ? static_cast<int>(list->size()) : 1;
  CHORUS_CHECK_ARG(spec.task_index >= 0 && spec.task_index < count, source, ": task index ",
                   spec.task_index, " is not below the number of ", role_name(spec.role),
                   " tasks (", count, ")");
  // Two tasks on one host:port cannot both listen: name both.
  std::map<std::string, std::string> seen;
  auto add = [&](const std::string& address, const std::string& task) {
    split_address(address, (source + ": " + task).c_str());
    auto [it, fresh] = seen.emplace(address, task);
    CHORUS_CHECK_ARG(fresh, source, ": address ", address, " is used by both ", it->second, " and ",
                     task);
  };
  add(spec.chief, "chief");
  for (size_t i = 0; i < spec.workers.size(); ++i)
    add(spec.workers[i], "worker " + std::to_string(i));
  for (size_t i = 0; i < spec.ps.size(); ++i) add(spec.ps[i], "ps " + std::to_string(i));
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kChief:
      return "chief";
    case Role::kWorker:
      return "worker";
    case Role::kPs:
      return "ps";
  }
  return "?";
}

ClusterSpec ClusterSpec::from_tf_config(const std::string& json) {
  tf_config::Config config = tf_config::parse(json);  // checks task.type and task.index
  ClusterSpec spec;
  auto list = [&](const char* role) {
    auto it = config.cluster.find(role);
    return it == config.cluster.end() ? std::vector<std::string>{} : it->second;
  };
  std::vector<std::string> chief = list("chief");
  spec.chief = chief.empty() ? "" : chief[0];
  spec.workers = list("worker");
  spec.ps = list("ps");
  spec.role = parse_role(config.task_type, "TF_CONFIG: task.type");
  spec.task_index = config.task_index;
  check_spec(spec, "TF_CONFIG");
  return spec;
}

ClusterSpec ClusterSpec::from_flags(const std::string& ps_hosts, const std::string& worker_hosts,
                                    const std::string& chief_host, const std::string& job_name,
                                    int task_index) {
  ClusterSpec spec;
  spec.ps = split_list(ps_hosts, "--ps_hosts");
  spec.workers = split_list(worker_hosts, "--worker_hosts");
  spec.chief = chief_host;
  spec.role = parse_role(job_name, "--job_name");
  spec.task_index = task_index;
  check_spec(spec, "flags");
  return spec;
}

ClusterSpec ClusterSpec::from_env() {
  auto text = env_string("TF_CONFIG");
  CHORUS_CHECK_ARG(text.has_value(),
                   "TF_CONFIG is not set: a parameter-server job needs the "
                   "cluster (chorusrun --ps K sets it)");
  return from_tf_config(*text);
}

const std::string& ClusterSpec::address() const {
  const auto* list = role_list(*this, role);
  if (!list) return chief;
  CHORUS_CHECK_ARG(task_index >= 0 && task_index < static_cast<int>(list->size()),
                   "ClusterSpec: task index ", task_index, " is not below the number of ",
                   role_name(role), " tasks (", list->size(), ")");
  return (*list)[task_index];
}

void ClusterSpec::validate() const { check_spec(*this, "ClusterSpec"); }

std::pair<std::string, uint16_t> split_address(const std::string& address, const char* what) {
  try {
    net::Endpoint ep = net::Endpoint::parse(address);
    CHORUS_CHECK_ARG(!ep.host.empty(), "empty host");
    return {ep.host, ep.port};
  } catch (const InvalidArgument&) {
    CHORUS_THROW(InvalidArgument, what, ": malformed address '", address,
                 "' (expected host:port with a port in 1..65535)");
  }
}

}  // namespace chorus::ps
