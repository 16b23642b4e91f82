// Helpers for tests that run the examples as processes: start with an environment and a
// log file, wait with a limit (a guard against hangs), pick a free port, read numbers
// back from a log.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/free_port.h"
#include "tools/run_helper.h"

namespace chorus::test {

using namespace std::chrono_literals;

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts `argv` with extra environment variables, output to `log`.
inline pid_t spawn(const std::vector<std::string>& argv, const EnvList& env,
                   const std::string& log) {
  std::fflush(nullptr);  // or the child's freopen() writes our buffered output a second time
  pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::freopen(log.c_str(), "w", stdout);
    ::dup2(::fileno(stdout), 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// Exit code, or -1 (and the process killed) after `timeout`.
inline int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline double number_after(const std::string& text, const std::string& key) {
  auto at = text.rfind(key);
  if (at == std::string::npos) return -1;
  return std::atof(text.c_str() + at + key.size());
}

}  // namespace chorus::test
