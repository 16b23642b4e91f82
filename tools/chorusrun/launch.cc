#include "launch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "chorus/error.h"
#include "elastic.h"
#include "slurm_hosts.h"
#include "util/net.h"

extern char** environ;

namespace chorus::run {
namespace {

std::string working_directory() {
  char buf[4096];
  if (!::getcwd(buf, sizeof(buf))) throw UsageError("cannot read the working directory");
  return buf;
}

// The local address the kernel would use to reach `host` (no packet is sent).
std::string route_address_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &list) != 0 || !list) {
    throw UsageError("unknown host '" + host + "'");
  }
  net::Fd fd(::socket(list->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  bool ok = fd.valid() && ::connect(fd.get(), list->ai_addr, list->ai_addrlen) == 0;
  ::freeaddrinfo(list);
  if (!ok) throw UsageError("no route to host '" + host + "' (use --store-address)");
  return net::local_address(fd.get());
}

// With --dashboard: the period of the ranks' reports to the page (chorus/report.h); the
// launcher's own CHORUS_REPORT_SECONDS wins.
void add_report_var(const Options& o, EnvVars& vars) {
  if (o.dashboard.empty()) return;
  const char* given = std::getenv("CHORUS_REPORT_SECONDS");
  vars.emplace_back("CHORUS_REPORT_SECONDS", given && *given ? given : "1");
}

EnvVars rank_vars(const JobPlan& plan, const Placement& p, int restart) {
  net::Endpoint store{plan.store_host, plan.store_port};
  EnvVars vars;
  // The place of the rank under both names: CHORUS_ for chorus, HOROVOD_ for the Horovod
  // scripts and tests that read them (as horovodrun's Gloo launcher sets them).
  const std::pair<const char*, int> place[] = {
      {"RANK", p.rank},
      {"SIZE", plan.options.np},
      {"LOCAL_RANK", p.local_rank},
      {"LOCAL_SIZE", p.local_size},
      {"CROSS_RANK", p.cross_rank},
      {"CROSS_SIZE", p.cross_size},
  };
  for (const char* prefix : {"CHORUS_", "HOROVOD_"}) {
    for (const auto& [name, value] : place) {
      vars.emplace_back(std::string(prefix) + name, std::to_string(value));
    }
  }
  vars.emplace_back("CHORUS_STORE_ADDR", store.to_string());
  vars.emplace_back("CHORUS_RESTART_COUNT", std::to_string(restart));
  vars.emplace_back("CHORUS_HOST_ID", p.host);
  add_report_var(plan.options, vars);
  return vars;
}

// -x NAME=VALUE, or -x NAME taking the launcher's value (skipped when unset).
EnvVars exported_vars(const Options& options) {
  EnvVars out;
  for (const std::string& e : options.exports) {
    auto eq = e.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(e.substr(0, eq), e.substr(eq + 1));
    } else if (const char* v = std::getenv(e.c_str())) {
      out.emplace_back(e, v);
    }
  }
  return out;
}

// What a remote process gets: its own variables, the launcher's CHORUS_ tunables (except
// those in `unset`), and -x.
EnvVars remote_vars(const JobPlan& plan, const EnvVars& own,
                    const std::vector<std::string>& unset) {
  EnvVars vars = own;
  std::set<std::string> taken(unset.begin(), unset.end());
  for (const auto& kv : vars) taken.insert(kv.first);
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("CHORUS_", 0) != 0 || name.rfind("CHORUS_SECRET", 0) == 0) continue;
    if (taken.insert(name).second) vars.emplace_back(name, entry.substr(name.size() + 1));
  }
  for (auto& kv : exported_vars(plan.options)) vars.push_back(kv);
  return vars;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t start = 0;
  while ((start = text.find_first_not_of(' ', start)) != std::string::npos) {
    size_t end = text.find(' ', start);
    words.push_back(text.substr(start, end - start));
    start = end;
  }
  return words;
}

SpawnSpec local_spec(const JobPlan& plan, const Placement& p, const EnvVars& own,
                     const std::vector<std::string>& unset) {
  EnvVars vars = own;
  for (auto& kv : exported_vars(plan.options)) vars.push_back(kv);
  vars.emplace_back("CHORUS_SECRET_FILE", plan.secret_file);
  SpawnSpec spec;
  spec.argv = plan.options.program;
  spec.argv[0] = plan.program;
  spec.env = inherited_env(vars, unset);
  spec.cpus = bound_cpus(plan, p);
  return spec;
}

SpawnSpec remote_spec(const JobPlan& plan, const Placement& p, const EnvVars& own,
                      const std::vector<std::string>& unset) {
  std::vector<std::string> program = plan.options.program;
  program[0] = plan.program;
  SpawnSpec spec;
  spec.argv = split_words(plan.options.rsh);
  spec.argv[0] = resolve_program(spec.argv[0]);
  for (const char* o :
       {"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", p.host.c_str()}) {
    spec.argv.push_back(o);
  }
  spec.argv.push_back("sh -c " +
                      shell_quote(remote_script(plan.cwd, remote_vars(plan, own, unset), program)));
  spec.env = inherited_env({}, unset);  // what a remote shell might pass on (SendEnv)
  // The secret travels on ssh's stdin (length, newline, bytes), never on a command line.
  spec.stdin_data = std::to_string(plan.secret.bytes().size()) + "\n" + plan.secret.bytes();
  spec.control_pipe = true;
  return spec;
}

SpawnSpec mpirun_spec(const JobPlan& plan, int restart) {
  const Options& o = plan.options;
  SpawnSpec spec;
  spec.argv = {resolve_program("mpirun"), "--tag-output"};
  if (::geteuid() == 0) spec.argv.push_back("--allow-run-as-root");
  if (o.oversubscribe || o.host_list.empty()) spec.argv.push_back("--oversubscribe");
  spec.argv.insert(spec.argv.end(), {"-np", std::to_string(o.np)});
  if (!o.host_list.empty()) spec.argv.insert(spec.argv.end(), {"-H", o.host_list});
  if (!o.hostfile.empty()) spec.argv.insert(spec.argv.end(), {"--hostfile", o.hostfile});
  // auto: mpirun's own default (cores for two ranks or fewer).
  if (o.bind_to != BindTo::kAuto)
    spec.argv.insert(spec.argv.end(), {"--bind-to", bind_to_name(o.bind_to)});
  EnvVars vars = {
      {"CHORUS_STORE_ADDR", net::Endpoint{plan.store_host, plan.store_port}.to_string()},
      {"CHORUS_RESTART_COUNT", std::to_string(restart)}};
  add_report_var(o, vars);
  // mpirun carries -x variables to its daemons itself; a multi-host job cannot use our file.
  if (plan.multi_host) {
    vars.emplace_back("CHORUS_SECRET", plan.secret.bytes());
  } else {
    vars.emplace_back("CHORUS_SECRET_FILE", plan.secret_file);
  }
  for (auto& kv : exported_vars(o)) vars.push_back(kv);
  for (const auto& kv : vars) spec.argv.insert(spec.argv.end(), {"-x", kv.first});
  spec.argv.push_back(plan.program);
  spec.argv.insert(spec.argv.end(), o.program.begin() + 1, o.program.end());
  spec.env = inherited_env(vars);
  return spec;
}

// --store-address "host" or "host:port" / "[v6]:port".
net::Endpoint parse_store_address(const std::string& text) {
  bool has_port = text[0] == '[' || std::count(text.begin(), text.end(), ':') == 1;
  if (!has_port) return net::Endpoint{text, 0};
  try {
    return net::Endpoint::parse(text);
  } catch (const InvalidArgument& e) {
    throw UsageError(std::string("--store-address: ") + e.what());
  }
}

// Slots a job takes: its ranks, or every task of a parameter-server cluster.
int process_count(const Options& o) { return o.ps_mode ? 1 + o.ps + o.np : o.np; }

}  // namespace

std::vector<int> bound_cpus(const JobPlan& plan, const Placement& p) {
  if (!p.local || plan.options.mpi) return {};
  return cpu_share(plan.cpus, p.local_rank, p.local_size, plan.options.bind_to);
}

SpawnSpec process_spec(const JobPlan& plan, const Placement& p, const EnvVars& own,
                       const std::vector<std::string>& unset) {
  return p.local ? local_spec(plan, p, own, unset) : remote_spec(plan, p, own, unset);
}

void add_relays(const JobPlan& plan, const std::string& label, const std::string& log_name,
                std::vector<std::unique_ptr<LineRelay>>& relays) {
  if (plan.options.output_dir.empty()) {
    relays.push_back(std::make_unique<LineRelay>(label, 1));
    relays.push_back(std::make_unique<LineRelay>(label, 2));
    return;
  }
  std::string path = plan.options.output_dir + "/" + log_name + ".log";
  relays.push_back(std::make_unique<LineRelay>(label, -1, path));
  relays.push_back(std::make_unique<LineRelay>(label, -1, path));
}

JobPlan make_plan(const Options& options) {
  JobPlan plan;
  plan.options = options;
  if (!options.host_list.empty()) {
    plan.hosts = parse_host_list(options.host_list);
  } else if (!options.hostfile.empty()) {
    plan.hosts = read_hostfile(options.hostfile);
  } else if (auto allocation = slurm_allocation()) {
    check_fits(*allocation, process_count(options), options.oversubscribe,
               options.ps_mode ? "tasks" : "ranks");
    plan.hosts = allocation->hosts;
  } else if (!options.discovery_script.empty()) {
    plan.hosts = discover_hosts(options.discovery_script, std::chrono::seconds(10));
  } else {
    plan.hosts = {{"localhost", std::max(process_count(options), options.max_np)}};
  }
  for (const HostSlots& h : plan.hosts) {
    if (!is_local_host(h.host)) check_resolves(h.host);
  }
  if (options.elastic()) {
    // As many of -np as there are slots now; an elastic job waits for the rest.
    int slots = 0;
    for (const HostSlots& h : plan.hosts) slots += h.slots;
    int start = std::min(options.np, slots);
    if (start > 0) plan.placements = place_ranks(plan.hosts, start, false, "workers");
  } else {
    plan.placements = place_ranks(plan.hosts, process_count(options), options.oversubscribe,
                                  options.ps_mode ? "tasks" : "ranks");
  }
  for (const Placement& p : plan.placements) plan.multi_host = plan.multi_host || !p.local;
  plan.cpus = allowed_cpus();
  // Before anything starts: --bind-to core on a host with more workers than cpus throws.
  if (options.bind_to == BindTo::kCore) {
    for (const Placement& p : plan.placements) bound_cpus(plan, p);
  }
  plan.program = resolve_program(options.program[0]);
  if (plan.multi_host && !options.mpi) resolve_program(split_words(options.rsh).at(0));
  if (options.mpi) resolve_program("mpirun");
  plan.cwd = working_directory();
  if (!options.output_dir.empty() && ::access(options.output_dir.c_str(), W_OK) != 0) {
    throw UsageError("--output-dir '" + options.output_dir + "' is not a writable directory");
  }
  return plan;
}

net::Endpoint store_bind_endpoint(const JobPlan& plan) {
  if (!plan.options.store_address.empty()) return parse_store_address(plan.options.store_address);
  if (!plan.multi_host) return {"127.0.0.1", 0};
  for (const Placement& p : plan.placements) {
    if (!p.local) return {route_address_to(p.host), 0};
  }
  return {"127.0.0.1", 0};
}

void prepare_secret(JobPlan& plan, const std::string& private_dir) {
  std::optional<Secret> given;
  try {
    given = Secret::from_env();
  } catch (const std::exception& e) {
    throw UsageError(e.what());
  }
  if (!given && plan.multi_host) {
    throw UsageError(
        "a multi-host job needs a shared secret: set CHORUS_SECRET or "
        "CHORUS_SECRET_FILE (a file of mode 0600) before starting chorusrun");
  }
  plan.secret = given ? *given : Secret::generate();
  plan.secret_file = private_dir + "/secret";
  plan.secret.write_file(plan.secret_file);
}

std::vector<Child> start_attempt(const JobPlan& plan, int restart,
                                 std::vector<std::unique_ptr<LineRelay>>& relays) {
  std::vector<Child> children;
  if (plan.options.mpi) {
    SpawnSpec spec = mpirun_spec(plan, restart);
    children.push_back(spawn(spec));
    children.back().label = "mpirun";
    children.back().host = "localhost";
    relays.push_back(std::make_unique<LineRelay>("", 1));
    relays.push_back(std::make_unique<LineRelay>("", 2));
    return children;
  }
  for (const Placement& p : plan.placements) {
    SpawnSpec spec = process_spec(plan, p, rank_vars(plan, p, restart), {});
    add_relays(plan, std::to_string(p.rank), "rank." + std::to_string(p.rank), relays);
    children.push_back(spawn(spec));
    Child& c = children.back();
    c.label = std::to_string(p.rank);
    c.host = p.host;
    c.remote = !p.local;
  }
  return children;
}

}  // namespace chorus::run
