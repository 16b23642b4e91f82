#include "spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>

#include "options.h"
#include "relay.h"

extern char** environ;

namespace chorus::run {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& in) {
  std::vector<char*> out;
  for (const std::string& s : in) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
}

// In the forked child: only async-signal-safe calls from here to exec. Signals arrive
// blocked (see spawn()): until the handlers are reset, a signal meant for this rank would
// run chorusrun's own handler here and be taken for one sent to chorusrun.
[[noreturn]] void exec_child(const SpawnSpec& spec, char* const* argv, char* const* envp,
                             const cpu_set_t* cpus, int in_fd, int out_fd, int err_fd) {
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(in_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  if (cpus && ::sched_setaffinity(0, sizeof(*cpus), cpus) != 0) {
    const char* warn = "chorusrun: cannot bind to the cpus given; running unbound\n";
    write_fully(2, warn, std::strlen(warn));
  }
  ::execve(argv[0], argv, envp);
  const char* msg = "chorusrun: cannot execute ";
  write_fully(2, msg, std::strlen(msg));
  write_fully(2, spec.argv[0].data(), spec.argv[0].size());
  write_fully(2, ": ", 2);
  const char* why = std::strerror(errno);
  write_fully(2, why, std::strlen(why));
  write_fully(2, "\n", 1);
  ::_exit(127);
}

const char* signal_abbrev(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    default:
      return nullptr;
  }
}

std::string signal_name(int sig) {
  const char* abbrev = signal_abbrev(sig);
  std::string name = abbrev ? abbrev : "signal " + std::to_string(sig);
  return name + " (" + ::strsignal(sig) + ")";
}

}  // namespace

Child spawn(const SpawnSpec& spec) {
  int out[2], err[2], in[2] = {-1, -1};
  make_pipe(out);
  make_pipe(err);
  if (spec.control_pipe) {
    make_pipe(in);
  } else {
    in[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  auto argv = c_strings(spec.argv);
  auto envp = c_strings(spec.env);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &previous);
  pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(spec, argv.data(), envp.data(), spec.cpus.empty() ? nullptr : &cpus, in[0], out[1],
               err[1]);
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  ::setpgid(pid, pid);  // also here: no race with a signal sent right after fork
  ::close(out[1]);
  ::close(err[1]);
  ::close(in[0]);
  Child child;
  child.pid = pid;
  child.out_fd = out[0];
  child.err_fd = err[0];
  child.ctl_fd = in[1];
  if (child.ctl_fd >= 0) {
    // A remote side that is gone must not kill chorusrun with SIGPIPE (ignored in main).
    write_fully(child.ctl_fd, spec.stdin_data.data(), spec.stdin_data.size());
  }
  return child;
}

std::string resolve_program(const std::string& program) {
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    if (!runnable(program))
      throw UsageError("program '" + program + "' is missing or not executable");
    if (program[0] == '/') return program;
    char cwd[4096];
    if (!::getcwd(cwd, sizeof(cwd))) throw UsageError("cannot read the working directory");
    return std::string(cwd) + "/" + program;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  for (;;) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (runnable(candidate)) return candidate[0] == '/' ? candidate : resolve_program(candidate);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw UsageError("program '" + program + "' not found in PATH");
}

std::vector<std::string> inherited_env(const EnvVars& overrides,
                                       const std::vector<std::string>& unset) {
  std::set<std::string> replaced = {"CHORUS_SECRET", "CHORUS_SECRET_FILE"};
  replaced.insert(unset.begin(), unset.end());
  for (const auto& kv : overrides) replaced.insert(kv.first);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (replaced.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
  }
  for (const auto& kv : overrides) env.push_back(kv.first + "=" + kv.second);
  return env;
}

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string remote_script(const std::string& cwd, const EnvVars& vars,
                          const std::vector<std::string>& program) {
  std::string command = "env CHORUS_SECRET_FILE=\"$f\"";
  for (const auto& kv : vars) command += " " + shell_quote(kv.first + "=" + kv.second);
  for (const std::string& word : program) command += " " + shell_quote(word);
  // setsid: the program leads its own process group, so "kill -- -$p" reaches its children.
  // Background jobs read /dev/null unless redirected: the watcher gets stdin through fd 3.
  return "cd " + shell_quote(cwd) +
         " || exit 127\n"
         "umask 077\n"
         "f=$(mktemp \"${TMPDIR:-/tmp}/chorus-secret.XXXXXX\") || exit 127\n"
         "trap 'rm -f \"$f\"' EXIT\n"
         "IFS= read -r n || exit 127\n"
         "head -c \"$n\" > \"$f\" || exit 127\n"
         "exec 3<&0\n"
         "setsid " +
         command +
         " </dev/null &\n"
         "p=$!\n"
         "(while IFS= read -r s; do kill -s \"$s\" -- -$p 2>/dev/null; done;"
         " kill -s KILL -- -$p 2>/dev/null) <&3 &\n"
         "w=$!\n"
         "wait $p; rc=$?\n"
         "kill $w 2>/dev/null\n"
         "exit $rc\n";
}

std::string describe_status(int status, bool remote) {
  if (WIFSIGNALED(status)) return "signal " + signal_name(WTERMSIG(status));
  int code = WEXITSTATUS(status);
  if (remote && code == 255) return "exit code 255 (ssh failed or the connection was lost)";
  if (remote && code > 128 && code < 128 + 32) {
    return "exit code " + std::to_string(code) + " (remote " + signal_name(code - 128) + ")";
  }
  return "exit code " + std::to_string(code);
}

int status_exit_code(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace chorus::run
