#include "ps_cluster.h"

#include "chorus/error.h"
#include "options.h"
#include "util/net.h"

namespace chorus::run {
namespace {

// Slot order: chief, then the ps tasks, then the workers.
PsTask task_at(const Options& o, int position) {
  if (position == 0) return {"chief", 0, {}, ""};
  if (position <= o.ps) return {"ps", position - 1, {}, ""};
  return {"worker", position - 1 - o.ps, {}, ""};
}

// A port nobody listens on now. The socket stays open in `held` until every local port of
// the cluster is chosen, so the tasks' ports are distinct.
uint16_t free_port(const std::string& host, std::vector<net::Fd>& held) {
  try {
    held.push_back(net::listen_tcp(host, 0, 1));
  } catch (const Error& e) {
    throw UsageError("cannot find a free port on " + host + ": " + e.what());
  }
  return net::local_port(held.back().get());
}

// Addresses need no JSON escaping: host names from -H are letters, digits and ".-_:"
// (hosts.cc checks), local ones numeric addresses.
std::string address_list(const std::vector<PsTask>& cluster, const std::string& role) {
  std::string out;
  for (const PsTask& t : cluster) {
    if (t.role == role) out += (out.empty() ? "\"" : ", \"") + t.address + "\"";
  }
  return "[" + out + "]";
}

}  // namespace

std::string PsTask::label() const {
  return role == "chief" ? role : role + " " + std::to_string(index);
}

std::string PsTask::log_name() const {
  return role == "chief" ? role : role + "." + std::to_string(index);
}

std::vector<PsTask> make_ps_cluster(const JobPlan& plan) {
  const Options& o = plan.options;
  std::string local_host = plan.multi_host ? store_bind_endpoint(plan).host : "127.0.0.1";
  std::vector<net::Fd> held;
  std::vector<PsTask> cluster;
  for (const Placement& p : plan.placements) {
    PsTask task = task_at(o, p.rank);
    task.placement = p;
    net::Endpoint at = p.local
                           ? net::Endpoint{local_host, free_port(local_host, held)}
                           : net::Endpoint{p.host, static_cast<uint16_t>(o.ps_port_base + p.rank)};
    task.address = at.to_string();
    cluster.push_back(task);
  }
  return cluster;
}

std::string tf_config_json(const std::vector<PsTask>& cluster, const PsTask& me) {
  return "{\"cluster\": {\"chief\": " + address_list(cluster, "chief") +
         ", \"worker\": " + address_list(cluster, "worker") +
         ", \"ps\": " + address_list(cluster, "ps") + "}, \"task\": {\"type\": \"" + me.role +
         "\", \"index\": " + std::to_string(me.index) + "}}";
}

EnvVars ps_task_vars(const std::vector<PsTask>& cluster, const PsTask& me, int restart) {
  return {
      {"TF_CONFIG", tf_config_json(cluster, me)},
      {"CHORUS_RESTART_COUNT", std::to_string(restart)},
      {"CHORUS_LAUNCHER", "tf_config"},
      {"CHORUS_HOST_ID", me.placement.host},
  };
}

const std::vector<std::string>& ps_unset_vars() {
  static const std::vector<std::string> names = {
      "CHORUS_RANK",       "CHORUS_SIZE",       "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_SIZE",
      "CHORUS_CROSS_RANK", "CHORUS_CROSS_SIZE", "CHORUS_STORE_ADDR",
  };
  return names;
}

}  // namespace chorus::run
