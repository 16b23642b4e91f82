// chorusrun: starts every rank of a job, relays their output, stops them all when one fails
// or when chorusrun is interrupted, and restarts the group on request. See docs/launcher.md.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "chorus/error.h"
#include "chorus/store.h"
#include "chorus/version.h"
#include "dashboard.h"
#include "elastic.h"
#include "launch.h"
#include "openblas.h"
#include "options.h"
#include "ps_attempt.h"
#include "supervise.h"
#include "util/net.h"

namespace chorus::run {
namespace {

// A directory only this user can enter, for the local copy of the secret; removed on exit.
class PrivateDir {
 public:
  PrivateDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/chorusrun.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw UsageError("cannot create a private directory in " + pattern);
    path_ = buf.data();
  }
  ~PrivateDir() {
    ::unlink((path_ + "/secret").c_str());
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<int> missing_ranks(Store& store, int restart, int np) {
  std::vector<int> missing;
  for (int r = 0; r < np; ++r) {
    // The convention of chorus::Job (src/comm/job.cc): set once connected to the store.
    std::string key = "chorus/joined/" + std::to_string(restart) + "/" + std::to_string(r);
    if (!store.check({key})) missing.push_back(r);
  }
  return missing;
}

// ", cpus 0-1" for a bound process; "" otherwise.
std::string cpus_text(const JobPlan& plan, const Placement& p) {
  std::vector<int> cpus = bound_cpus(plan, p);
  return cpus.empty() ? "" : ", cpus " + cpu_list_text(cpus);
}

void show_plan(const JobPlan& plan, int restart) {
  say("attempt " + std::to_string(restart) + ": store at " +
      net::Endpoint{plan.store_host, plan.store_port}.to_string() +
      (plan.options.mpi ? ", starting mpirun" : ""));
  if (plan.options.mpi) return;
  for (const Placement& p : plan.placements) {
    say("rank " + std::to_string(p.rank) + " on " + p.host +
        (p.local ? " (local)" : " (" + plan.options.rsh + ")") + " local " +
        std::to_string(p.local_rank) + "/" + std::to_string(p.local_size) + " host " +
        std::to_string(p.cross_rank) + "/" + std::to_string(p.cross_size) + cpus_text(plan, p) +
        ": " + plan.program);
  }
}

// Starts one attempt's processes: the ranks of a collective job, or (with `ps` set) every
// task of a parameter-server cluster, whose exit policy `ps` then provides.
std::vector<Child> start(const JobPlan& plan, int restart, Store* store, PsAttempt* ps,
                         SuperviseOptions& so, std::vector<std::unique_ptr<LineRelay>>& relays) {
  const Options& o = plan.options;
  if (ps) {
    ps->install(so);
    return ps->start(relays);
  }
  if (o.verbose) show_plan(plan, restart);
  if (store)
    so.missing_ranks = [store, restart, &o] { return missing_ranks(*store, restart, o.np); };
  return start_attempt(plan, restart, relays);
}

bool numeric(const std::string& label) {
  return !label.empty() && label.find_first_not_of("0123456789") == std::string::npos;
}

// Tells the dashboard about an attempt's ranks, and has it told of their exits and of the
// engine's stall warnings in their output.
void connect_dashboard(Dashboard& dash, int restart, const std::vector<Child>& children,
                       std::vector<std::unique_ptr<LineRelay>>& relays, SuperviseOptions& so) {
  std::vector<web::JobBoard::RankProcess> procs;
  for (size_t i = 0; i < children.size(); ++i) {
    const Child& c = children[i];
    if (!numeric(c.label)) continue;
    const int rank = std::stoi(c.label);
    procs.push_back({rank, c.host, c.pid, !c.remote});
    for (size_t k = 2 * i; k < 2 * i + 2 && k < relays.size(); ++k) {
      relays[k]->set_observer([&dash, rank](std::string_view line) {
        if (line.find("[engine] stall:") != std::string_view::npos)
          dash.board().output_line(rank, std::string(line));
      });
    }
  }
  dash.board().attempt_started(restart, procs);
  so.on_exit = [&dash](const Child& c, const std::string& what) {
    if (numeric(c.label))
      dash.board().rank_exited(std::stoi(c.label),
                               WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0, what);
  };
}

int run_attempts(JobPlan& plan, Store* store, Dashboard* dash) {
  const Options& o = plan.options;
  for (int restart = 0;; ++restart) {
    SuperviseOptions so;
    so.grace = std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
    so.start_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.start_timeout * 1000));
    so.verbose = o.verbose;
    std::unique_ptr<PsAttempt> ps =
        o.ps_mode ? std::make_unique<PsAttempt>(plan, restart) : nullptr;
    std::vector<std::unique_ptr<LineRelay>> relays;
    std::vector<Child> children = start(plan, restart, store, ps.get(), so, relays);
    if (dash) connect_dashboard(*dash, restart, children, relays, so);
    AttemptResult result = Supervisor(std::move(children), std::move(relays), so).run();
    if (result.success) {
      if (dash) dash->board().job_ended("every rank exited 0");
      return 0;
    }
    if (result.interrupted_by != 0) {
      say(std::string(o.ps_mode ? "stopped every task (" : "stopped every rank (") +
          result.failure + ")");
      if (dash) dash->board().job_ended("interrupted: " + result.failure);
      return result.exit_code;
    }
    if (restart >= o.max_restarts) {
      say("job failed: " + result.failure);
      if (dash) dash->board().job_ended("failed: " + result.failure);
      return result.exit_code != 0 ? result.exit_code : 1;
    }
    if (dash) dash->board().attempt_ended(result.failure, true);
    say("restarting the job (restart " + std::to_string(restart + 1) + " of " +
        std::to_string(o.max_restarts) + ") after: " + result.failure);
  }
}

// An elastic job: one supervised run whose workers come and go (elastic.h).
int run_elastic(const JobPlan& plan, Store& store) {
  const Options& o = plan.options;
  SuperviseOptions so;
  so.grace = std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
  so.verbose = o.verbose;
  ElasticJob job(plan, store);
  job.install(so);
  std::vector<std::unique_ptr<LineRelay>> relays;
  std::vector<Child> children = job.start(relays);
  AttemptResult result = Supervisor(std::move(children), std::move(relays), so).run();
  if (result.success) return 0;
  say(result.interrupted_by ? "stopped every worker (" + result.failure + ")"
                            : "job failed: " + result.failure);
  return result.exit_code != 0 ? result.exit_code : 1;
}

// Whether some process of the job is started on this host (directly or by a local mpirun).
bool starts_local_processes(const JobPlan& plan) {
  if (plan.options.mpi) return true;
  for (const Placement& p : plan.placements) {
    if (p.local) return true;
  }
  return false;
}

std::unique_ptr<Dashboard> start_dashboard(const JobPlan& plan) {
  const Options& o = plan.options;
  if (o.dashboard.empty()) return nullptr;
  DashboardConfig c;
  c.bind = parse_dashboard_address(o.dashboard);
  if (!web::is_loopback_host(c.bind.host) && !Secret::from_env()) {
    throw UsageError(
        "--dashboard beyond loopback needs the job secret as the page's token: set "
        "CHORUS_SECRET or CHORUS_SECRET_FILE before starting chorusrun");
  }
  c.stall_seconds = o.dashboard_stall;
  c.report_seconds = std::max(
      0.1,
      std::atof(std::getenv("CHORUS_REPORT_SECONDS") ? std::getenv("CHORUS_REPORT_SECONDS") : "1"));
  if (const char* t = std::getenv("CHORUS_TIMELINE"); t && *t && !o.mpi) {
    c.timeline_path = t[0] == '/' ? t : plan.cwd + "/" + t;
  }
  for (const std::string& w : o.program) c.title += (c.title.empty() ? "" : " ") + w;
  auto dash = std::make_unique<Dashboard>(c, o.np, plan.secret);
  say("dashboard at " + dash->url() +
      (web::is_loopback_host(c.bind.host) ? "" : "?token=<the job secret>"));
  return dash;
}

int run_job(const Options& options) {
  install_signal_handlers();
  JobPlan plan = make_plan(options);
  // Before any thread exists: the probe forks.
  if (starts_local_processes(plan)) tune_openblas_for_local_workers(options.verbose);
  PrivateDir dir;
  prepare_secret(plan, dir.path());
  // A parameter-server cluster's chief hosts its store (TF_CONFIG's convention).
  if (options.ps_mode) return run_attempts(plan, nullptr, nullptr);
  net::Endpoint bind = store_bind_endpoint(plan);
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = std::make_unique<TcpStoreServer>(bind.host, bind.port, plan.secret);
  } catch (const Error& e) {
    throw UsageError("cannot start the rendezvous store on " + bind.host + ": " + e.what());
  }
  plan.store_host = bind.host;
  plan.store_port = server->port();
  std::unique_ptr<TcpStoreClient> client;
  if (options.start_timeout > 0 || options.elastic()) {
    client = std::make_unique<TcpStoreClient>(bind.host, plan.store_port, plan.secret,
                                              std::chrono::seconds(10));
  }
  if (options.elastic()) return run_elastic(plan, *client);
  std::unique_ptr<Dashboard> dash = start_dashboard(plan);
  if (dash) dash->watch_store(bind.host, plan.store_port);
  int code = run_attempts(plan, client.get(), dash.get());
  if (dash && options.dashboard_linger > 0) {
    say("job over; the dashboard stays at " + dash->url() + " for " +
        std::to_string(static_cast<int64_t>(options.dashboard_linger)) + " s (Ctrl-C ends it)");
    wait_for_interrupt(
        std::chrono::milliseconds(static_cast<int64_t>(options.dashboard_linger * 1000)));
  }
  return code;
}

}  // namespace
}  // namespace chorus::run

int main(int argc, char** argv) {
  using namespace chorus::run;
  try {
    Options options = parse_options(argc, argv);
    if (options.show_version) {
      std::printf("chorusrun (chorus) %s\n", chorus::version());
      return 0;
    }
    return run_job(options);
  } catch (const UsageError& e) {
    if (e.what()[0] == '\0') {
      std::fputs(usage_text(), stdout);
      return 0;
    }
    say(e.what());
    std::fputs("Try 'chorusrun --help'.\n", stderr);
    return 2;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 1;
  }
}
