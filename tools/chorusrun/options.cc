#include "options.h"

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>

namespace chorus::run {
namespace {

int parse_int(const std::string& option, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < INT32_MIN || v > INT32_MAX) {
    throw UsageError(option + " expects an integer, got '" + text + "'");
  }
  return static_cast<int>(v);
}

double parse_seconds(const std::string& option, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !(v >= 0) || v > 1e7) {
    throw UsageError(option + " expects a non-negative number of seconds, got '" + text + "'");
  }
  return v;
}

using ValueSetter = std::function<void(Options&, const std::string& name, const std::string&)>;
using FlagSetter = std::function<void(Options&)>;

const std::map<std::string, ValueSetter>& value_options() {
  static const std::map<std::string, ValueSetter> table = {
      {"-np", [](Options& o, auto& n, auto& v) { o.np = parse_int(n, v); }},
      {"-n", [](Options& o, auto& n, auto& v) { o.np = parse_int(n, v); }},
      {"-H", [](Options& o, auto&, auto& v) { o.host_list = v; }},
      {"--hosts", [](Options& o, auto&, auto& v) { o.host_list = v; }},
      {"--hostfile", [](Options& o, auto&, auto& v) { o.hostfile = v; }},
      {"--output-dir", [](Options& o, auto&, auto& v) { o.output_dir = v; }},
      {"--grace-seconds",
       [](Options& o, auto& n, auto& v) { o.grace_seconds = parse_seconds(n, v); }},
      {"--start-timeout",
       [](Options& o, auto& n, auto& v) { o.start_timeout = parse_seconds(n, v); }},
      {"--max-restarts", [](Options& o, auto& n, auto& v) { o.max_restarts = parse_int(n, v); }},
      {"--ps",
       [](Options& o, auto& n, auto& v) {
         o.ps = parse_int(n, v);
         o.ps_mode = true;
       }},
      {"--ps-port-base", [](Options& o, auto& n, auto& v) { o.ps_port_base = parse_int(n, v); }},
      {"--worker-restarts",
       [](Options& o, auto& n, auto& v) { o.worker_restarts = parse_int(n, v); }},
      {"--store-address", [](Options& o, auto&, auto& v) { o.store_address = v; }},
      {"--rsh", [](Options& o, auto&, auto& v) { o.rsh = v; }},
      {"-x", [](Options& o, auto&, auto& v) { o.exports.push_back(v); }},
      {"--dashboard", [](Options& o, auto&, auto& v) { o.dashboard = v; }},
      {"--dashboard-linger",
       [](Options& o, auto& n, auto& v) { o.dashboard_linger = parse_seconds(n, v); }},
      {"--bind-to", [](Options& o, auto&, auto& v) { o.bind_to = parse_bind_to(v); }},
      {"--min-np", [](Options& o, auto& n, auto& v) { o.min_np = parse_int(n, v); }},
      {"--max-np", [](Options& o, auto& n, auto& v) { o.max_np = parse_int(n, v); }},
      {"--host-discovery-script", [](Options& o, auto&, auto& v) { o.discovery_script = v; }},
      {"--discovery-interval",
       [](Options& o, auto& n, auto& v) { o.discovery_interval = parse_seconds(n, v); }},
      {"--elastic-timeout",
       [](Options& o, auto& n, auto& v) { o.elastic_timeout = parse_seconds(n, v); }},
      {"--blacklist-cooldown",
       [](Options& o, auto& n, auto& v) { o.blacklist_cooldown = parse_seconds(n, v); }},
      {"--dashboard-stall",
       [](Options& o, auto& n, auto& v) { o.dashboard_stall = parse_seconds(n, v); }},
  };
  return table;
}

const std::map<std::string, FlagSetter>& flag_options() {
  static const std::map<std::string, FlagSetter> table = {
      {"--oversubscribe", [](Options& o) { o.oversubscribe = true; }},
      {"--mpi", [](Options& o) { o.mpi = true; }},
      {"--verbose", [](Options& o) { o.verbose = true; }},
      {"-v", [](Options& o) { o.verbose = true; }},
  };
  return table;
}

// --ps K: what a parameter-server cluster can and cannot be combined with.
void validate_ps(const Options& o) {
  if (!o.ps_mode) return;
  if (o.ps <= 0)
    throw UsageError("--ps must be a positive number of ps tasks, got " + std::to_string(o.ps));
  if (o.mpi)
    throw UsageError("--mpi is not supported with --ps (chorusrun starts the cluster itself)");
  // The launcher hosts no store for a cluster (the chief does), so nothing can tell who joined.
  if (o.start_timeout > 0) throw UsageError("--start-timeout is not supported with --ps");
  if (!o.dashboard.empty()) throw UsageError("--dashboard is not supported with --ps");
  if (o.worker_restarts < 0) throw UsageError("--worker-restarts must not be negative");
  if (o.ps_port_base <= 0 || o.ps_port_base > 65535L - o.np - o.ps) {
    throw UsageError("--ps-port-base " + std::to_string(o.ps_port_base) +
                     " leaves no room for the cluster's ports below 65536");
  }
}

// --min-np A --max-np B [--host-discovery-script S]: an elastic job.
void validate_elastic(Options& o) {
  bool asked = o.min_np != 0 || o.max_np != 0 || !o.discovery_script.empty();
  if (!asked) return;
  if (o.min_np == 0) o.min_np = o.np > 0 ? o.np : 1;
  if (o.np == 0) o.np = o.max_np > 0 ? o.max_np : o.min_np;
  if (o.min_np < 1) throw UsageError("--min-np must be at least 1");
  if (o.max_np != 0 && o.max_np < o.min_np)
    throw UsageError("--max-np " + std::to_string(o.max_np) + " is below --min-np " +
                     std::to_string(o.min_np));
  if (o.np < o.min_np || (o.max_np != 0 && o.np > o.max_np))
    throw UsageError("-np " + std::to_string(o.np) + " must lie within --min-np and --max-np");
  if (!o.discovery_script.empty() && (!o.host_list.empty() || !o.hostfile.empty()))
    throw UsageError("--host-discovery-script replaces -H and --hostfile");
  if (o.discovery_interval < 0.05) throw UsageError("--discovery-interval must be >= 0.05 s");
  for (const char* other : {"--mpi", "--ps", "--max-restarts", "--start-timeout", "--dashboard"}) {
    bool used = (other == std::string("--mpi") && o.mpi) ||
                (other == std::string("--ps") && o.ps_mode) ||
                (other == std::string("--max-restarts") && o.max_restarts > 0) ||
                (other == std::string("--start-timeout") && o.start_timeout > 0) ||
                (other == std::string("--dashboard") && !o.dashboard.empty());
    if (used) throw UsageError(std::string(other) + " is not supported in an elastic job");
  }
}

void validate(Options& o) {
  validate_elastic(o);
  std::string what = o.ps_mode ? "-np must be a positive number of workers, got "
                               : "-np must be a positive number of ranks, got ";
  if (o.np <= 0) throw UsageError(what + std::to_string(o.np));
  if (o.program.empty()) throw UsageError("no program given");
  if (!o.host_list.empty() && !o.hostfile.empty()) {
    throw UsageError("-H and --hostfile are exclusive");
  }
  if (o.max_restarts < 0) throw UsageError("--max-restarts must not be negative");
  if (o.rsh.find_first_not_of(' ') == std::string::npos)
    throw UsageError("--rsh must name a program");
  for (const std::string& e : o.exports) {
    if (e.empty() || e[0] == '=' || e.rfind("CHORUS_SECRET", 0) == 0) {
      throw UsageError("-x '" + e +
                       "': expected NAME or NAME=VALUE (the secret is never exported)");
    }
  }
  validate_ps(o);
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  bool np_seen = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") throw UsageError("");
    if (arg == "--version") {
      o.show_version = true;
      return o;
    }
    std::string value;
    auto eq = arg.find('=');
    std::string name =
        (arg.rfind("--", 0) == 0 && eq != std::string::npos) ? arg.substr(0, eq) : arg;
    if (auto f = flag_options().find(name); f != flag_options().end()) {
      f->second(o);
      continue;
    }
    auto v = value_options().find(name);
    if (v == value_options().end()) {
      if (!arg.empty() && arg[0] == '-') throw UsageError("unknown option '" + arg + "'");
      break;  // the program: everything from here on is its command line
    }
    if (name != arg) {
      value = arg.substr(eq + 1);
    } else if (++i < argc) {
      value = argv[i];
    } else {
      throw UsageError(name + " expects a value");
    }
    v->second(o, name, value);
    np_seen = np_seen || name == "-np" || name == "-n";
  }
  for (; i < argc; ++i) o.program.push_back(argv[i]);
  if (!np_seen && o.min_np == 0 && o.max_np == 0) throw UsageError("-np N is required");
  validate(o);
  return o;
}

const char* usage_text() {
  return "usage: chorusrun -np N [-H host:slots,... | --hostfile FILE] [options] [--] PROGRAM "
         "[ARGS...]\n"
         "       chorusrun --ps K -np N [...] PROGRAM [ARGS...]   (parameter-server cluster)\n"
         "  --oversubscribe        allow more ranks than slots\n"
         "  --mpi                  start the ranks with OpenMPI's mpirun\n"
         "  --bind-to auto|core|none  give each local worker its own share of the cpus\n"
         "                         (auto: when there is at least one cpu per worker)\n"
         "  --output-dir DIR       write DIR/rank.<r>.log instead of [r]-prefixed lines\n"
         "  --verbose, -v          show what is started where\n"
         "  --grace-seconds S      SIGTERM to SIGKILL delay when stopping ranks (5)\n"
         "  --start-timeout S      fail when a rank has not joined the store after S (off)\n"
         "  --max-restarts K       restart the whole group up to K times after a failure (0)\n"
         "  --store-address ADDR   address the rendezvous store binds and ranks dial\n"
         "  -x NAME[=VALUE]        forward this variable to every rank (remote ranks too)\n"
         "  --rsh CMD              remote shell instead of ssh\n"
         "  --dashboard [ADDR:]PORT  serve a web page of the job (loopback unless ADDR; beyond\n"
         "                         loopback the page needs ?token=<the job secret>)\n"
         "  --dashboard-linger S   keep serving the page S seconds after the job ended (0)\n"
         "  --dashboard-stall S    a rank without progress for S shows as stalled (10)\n"
         "  --version              print chorus's version and exit\n"
         "Elastic jobs (docs/elastic.md): workers leave and join without restarting the others.\n"
         "  --min-np A / --max-np B  the job runs with A to B workers (-np: how many to start)\n"
         "  --host-discovery-script S  prints 'host:slots' lines; run every interval\n"
         "  --discovery-interval S seconds between runs of the script (1)\n"
         "  --elastic-timeout S    fail when below --min-np for S seconds (600)\n"
         "  --blacklist-cooldown S a failed worker's slot is reused after S seconds (0: never)\n"
         "Parameter-server clusters (--ps K): 1 chief + N workers + K ps tasks of PROGRAM,\n"
         "placed chief, ps 0..K-1, worker 0..N-1 on the slots; each gets TF_CONFIG, no\n"
         "CHORUS_RANK. The chief exiting 0 ends the job (the others get the grace period,\n"
         "then SIGTERM); a failed worker is restarted alone; a failed chief or ps task ends\n"
         "the attempt (--max-restarts restarts the whole cluster).\n"
         "  --ps K                 number of ps tasks; -np counts the workers\n"
         "  --worker-restarts M    restarts of each failed worker within an attempt (3)\n"
         "  --ps-port-base P       remote tasks listen on P + their cluster position (29500)\n"
         "  --output-dir DIR       (--ps) DIR/chief.log, DIR/worker.<i>.log, DIR/ps.<i>.log\n"
         "See docs/launcher.md.\n";
}

}  // namespace chorus::run
