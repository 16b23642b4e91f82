// Runs the real chorusrun binary for the launcher tests and collects what it printed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace chorus::test {

struct RunResult {
  int exit_code = -1;  // 128 + signal when chorusrun itself died of a signal
  std::string out;
  std::string err;
  double seconds = 0;
  bool timed_out = false;
};

using EnvList = std::vector<std::pair<std::string, std::string>>;

struct RunSpec {
  explicit RunSpec(std::vector<std::string> a, EnvList e = {})
      : args(std::move(a)), env(std::move(e)) {}

  std::vector<std::string> args;   // after "chorusrun" (or `program`)
  EnvList env;                     // set for chorusrun only
  std::vector<std::string> unset;  // removed from chorusrun's environment
  std::chrono::milliseconds timeout{20000};
  // Called in a helper thread once chorusrun runs (e.g. to send it SIGINT).
  std::function<void(pid_t)> during;
  std::string program;  // empty: the chorusrun under test; else run this one (PATH searched)
};

RunResult run_chorusrun(const RunSpec& spec);

// Lines of `text` that start with `prefix`.
std::vector<std::string> lines_with_prefix(const std::string& text, const std::string& prefix);

// NAME=VALUE lines printed by "fake_worker env" for one rank, from r.out.
std::map<std::string, std::string> env_of(const RunResult& r, int rank);

// A fresh directory under /tmp, removed with its files by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Waits until `path` exists (true) or `timeout` passes (false).
bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout);
// Whether a process with this pid exists (kill(pid, 0)).
bool process_alive(pid_t pid);
pid_t read_pid(const std::string& path);

}  // namespace chorus::test
