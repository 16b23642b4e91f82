// Starting one process per rank (or one mpirun for the whole job), each in its own process
// group so that chorusrun can signal a rank together with anything it started.
//
// Remote ranks run `RSH -o BatchMode=yes HOST 'sh -c SCRIPT'`. The script (remote_script())
// changes to the same working directory, reads the secret from ssh's stdin into a fresh
// 0600 file that it removes on exit, starts the program with the rank's variables given
// explicitly through `env`, and then keeps reading stdin: a line "TERM" or "KILL" signals
// the program's process group, and end of input (chorusrun or the connection gone) kills
// it — so no rank outlives its launcher, on any host.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace chorus::run {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

struct Child {
  std::string label;  // "3" for rank 3, "mpirun"
  std::string host;
  bool remote = false;
  pid_t pid = -1;   // also the process group id
  int out_fd = -1;  // read ends of the child's stdout / stderr
  int err_fd = -1;
  int ctl_fd = -1;  // remote only: write end of ssh's stdin
  bool exited = false;
  int status = 0;  // from waitpid
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] must be a path (already resolved)
  std::vector<std::string> env;   // complete environment, "NAME=VALUE"
  std::string stdin_data;         // remote: written first to the control pipe
  bool control_pipe = false;      // keep a pipe on the child's stdin (else /dev/null)
  std::vector<int> cpus;          // bind the child to these cpus (empty: inherit chorusrun's)
};

// fork/exec in a new process group, bound to spec.cpus (a failure to bind is reported on
// the child's stderr and the child runs unbound). Throws std::runtime_error when fork or pipe
// fails; an exec failure shows up as exit code 127 with a message on the child's stderr.
Child spawn(const SpawnSpec& spec);

// Absolute path of `program` (searched in PATH when it has no '/'); UsageError if it is
// missing or not executable.
std::string resolve_program(const std::string& program);

// The launcher's own environment without CHORUS_SECRET* and the names in `unset`, with
// `overrides` replacing what the launcher has of the same names.
std::vector<std::string> inherited_env(const EnvVars& overrides,
                                       const std::vector<std::string>& unset = {});

// POSIX shell quoting: 'it'\''s'.
std::string shell_quote(const std::string& word);

// The remote side of an ssh-started rank (see above).
std::string remote_script(const std::string& cwd, const EnvVars& vars,
                          const std::vector<std::string>& program);

// Human-readable waitpid status: "exit code 3", "signal SIGSEGV (Segmentation fault)".
// For a remote rank, codes above 128 are the remote shell's way of saying "signal".
std::string describe_status(int status, bool remote);
// The exit status chorusrun passes on for a child status: the code, or 128 + signal.
int status_exit_code(int status);

}  // namespace chorus::run
