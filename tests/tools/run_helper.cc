#include "run_helper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace chorus::test {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void exec_chorusrun(const RunSpec& spec, int out, int err) {
  ::dup2(out, 1);
  ::dup2(err, 2);
  for (const std::string& name : spec.unset) ::unsetenv(name.c_str());
  for (const auto& kv : spec.env) ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
  const char* program = spec.program.empty() ? CHORUSRUN_PATH : spec.program.c_str();
  std::vector<char*> argv = {const_cast<char*>(program)};
  for (const std::string& a : spec.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(program, argv.data());
  ::_exit(126);
}

// Reads both pipes until both close or the deadline passes.
bool drain(int out_fd, int err_fd, RunResult& r, Clock::time_point deadline) {
  int fds[2] = {out_fd, err_fd};
  std::string* sinks[2] = {&r.out, &r.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      char buf[65536];
      ssize_t n = ::read(fds[i], buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  return true;
}

}  // namespace

RunResult run_chorusrun(const RunSpec& spec) {
  int out[2], err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0) std::abort();
  auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) exec_chorusrun(spec, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  std::thread helper;
  if (spec.during) helper = std::thread([&] { spec.during(pid); });
  RunResult r;
  if (!drain(out[0], err[0], r, start + spec.timeout)) {
    r.timed_out = true;
    ::kill(pid, SIGKILL);
    drain(out[0], err[0], r, Clock::now() + std::chrono::seconds(2));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (helper.joinable()) helper.join();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

std::vector<std::string> lines_with_prefix(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

std::map<std::string, std::string> env_of(const RunResult& r, int rank) {
  std::map<std::string, std::string> vars;
  for (const std::string& line : lines_with_prefix(r.out, "[" + std::to_string(rank) + "] ")) {
    std::string body = line.substr(line.find("] ") + 2);
    auto eq = body.find('=');
    if (eq != std::string::npos) vars[body.substr(0, eq)] = body.substr(eq + 1);
  }
  return vars;
}

TempDir::TempDir() {
  char pattern[] = "/tmp/chorusrun_test.XXXXXX";
  path_ = ::mkdtemp(pattern);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool process_alive(pid_t pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
  // A zombie (dead, not yet reaped by its new parent) counts as gone.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() || text[close + 2] != 'Z';
}

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = -1;
  in >> pid;
  return pid;
}

}  // namespace chorus::test
