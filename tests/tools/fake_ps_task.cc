// A stand-in for a ParameterServerStrategy program, started by `chorusrun --ps K` in the
// launcher tests. Every task first prints what it was given:
//   TF_CONFIG=..., CHORUS_RANK=..., ... (see print_env), secret_file_mode=600,
//   job=<source> <rank>/<size> <role> <index>   (as chorus::read_job_env() reads it)
// and then behaves by role:
//   fake_ps_task DIR [--linger] [--crash-once ROLE:I] [--crash ROLE:I] [--crashes K]
//                    [--chief-exit CODE] [--chief-stays]
//   - every task writes DIR/pid.<restart>.<role>.<index> (its pid);
//   - the chief waits until every other task of its attempt wrote that file (except a task
//     named by --crash), and until K crashed tasks (--crashes) are gone and reaped by
//     chorusrun, then writes DIR/done.<restart> and exits CODE (0), or never (--chief-stays);
//   - workers and ps tasks print "left on my own" and exit 0 once DIR/done.<restart>
//     exists, unless --linger (then only a signal ends them);
//   - --crash-once ROLE:I: that task exits 3 on its first start (marker DIR/crashed.ROLE.I),
//     --crash ROLE:I: on every start; each crash appends its pid to DIR/crashes.<restart>.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/job_env.h"

namespace {

struct Args {
  std::string dir;
  bool linger = false;
  bool chief_stays = false;
  int chief_exit = 0;
  int crashes = 0;
  std::string crash_once;  // "worker:1"
  std::string crash;
};

std::string var(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

Args parse_args(int argc, char** argv) {
  Args a;
  a.dir = argc > 1 ? argv[1] : ".";
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--linger") a.linger = true;
    if (flag == "--chief-stays") a.chief_stays = true;
    if (flag == "--chief-exit") a.chief_exit = std::atoi(value.c_str()), ++i;
    if (flag == "--crashes") a.crashes = std::atoi(value.c_str()), ++i;
    if (flag == "--crash-once") a.crash_once = value, ++i;
    if (flag == "--crash") a.crash = value, ++i;
  }
  return a;
}

void print_env(const chorus::JobEnv& env) {
  for (const char* name :
       {"TF_CONFIG", "CHORUS_RANK", "CHORUS_SIZE", "CHORUS_STORE_ADDR", "CHORUS_RESTART_COUNT",
        "CHORUS_LAUNCHER", "CHORUS_HOST_ID", "CHORUS_SECRET", "CHORUS_TEST_EXPORT"}) {
    std::printf("%s=%s\n", name, var(name).c_str());
  }
  struct stat st {};
  std::string file = var("CHORUS_SECRET_FILE");
  bool ok = !file.empty() && ::stat(file.c_str(), &st) == 0 && st.st_size > 0;
  std::printf("secret_file_mode=%o\n", ok ? static_cast<unsigned>(st.st_mode & 0777) : 0u);
  std::printf("job=%s %d/%d %s %d\n", env.source.c_str(), env.rank, env.size, env.role.c_str(),
              env.task_index);
  std::fflush(stdout);
}

// Written whole under a temporary name, then renamed: a reader never sees half a file.
void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

std::vector<pid_t> crashed_pids(const std::string& path) {
  std::ifstream in(path);
  std::vector<pid_t> pids;
  for (pid_t p; in >> p;) pids.push_back(p);
  return pids;
}

// Crashed tasks are reaped once kill() says ESRCH (a zombie still exists): by then
// chorusrun has decided what their exit means.
bool crashes_reaped(const std::string& path, int expected) {
  std::vector<pid_t> pids = crashed_pids(path);
  if (static_cast<int>(pids.size()) < expected) return false;
  for (pid_t p : pids) {
    if (::kill(p, 0) == 0 || errno != ESRCH) return false;
  }
  return true;
}

bool others_up(const Args& a, const chorus::JobEnv& env, const std::string& restart) {
  for (const auto& [role, list] : env.cluster) {
    for (size_t i = 0; i < list.size(); ++i) {
      std::string name = role + ":" + std::to_string(i);
      if (role == "chief" || name == a.crash) continue;
      if (!exists(a.dir + "/pid." + restart + "." + role + "." + std::to_string(i))) return false;
    }
  }
  return crashes_reaped(a.dir + "/crashes." + restart, a.crashes);
}

int run_chief(const Args& a, const chorus::JobEnv& env, const std::string& restart) {
  while (a.chief_stays || !others_up(a, env, restart)) sleep_ms(10);
  write_file(a.dir + "/done." + restart, "done\n");
  return a.chief_exit;
}

int run_other(const Args& a, const std::string& restart) {
  while (a.linger || !exists(a.dir + "/done." + restart)) sleep_ms(10);
  std::printf("left on my own\n");
  return 0;
}

bool crashes_now(const Args& a, const std::string& me) {
  if (me == a.crash) return true;
  if (me != a.crash_once) return false;
  std::string marker = a.dir + "/crashed." + me;
  if (exists(marker)) return false;
  write_file(marker, "1\n");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  chorus::JobEnv env = chorus::read_job_env();
  print_env(env);
  std::string restart = std::to_string(env.restart_count);
  std::string me = env.role + ":" + std::to_string(env.task_index);
  if (crashes_now(a, me)) {
    std::ofstream(a.dir + "/crashes." + restart, std::ios::app) << ::getpid() << "\n";
    return 3;
  }
  write_file(a.dir + "/pid." + restart + "." + env.role + "." + std::to_string(env.task_index),
             std::to_string(::getpid()) + "\n");
  return env.role == "chief" ? run_chief(a, env, restart) : run_other(a, restart);
}
