// Watching one attempt of a job: relays output, reaps children, and stops everyone when a
// rank fails, when a rank has not joined the rendezvous by the start timeout, or when
// chorusrun itself gets SIGINT/SIGTERM/SIGHUP. Stopping = SIGTERM to each child's process
// group ("TERM" down the control pipe for remote ranks), SIGKILL after the grace period.
// What a child's exit means is a policy (SuperviseOptions::decide): by default a failed
// rank fails the attempt; a parameter-server cluster also restarts single children and
// ends successfully when its chief does (ps_attempt.h).
//
// Signals reach the loop through a self-pipe (install_signal_handlers()), so every wait is
// a poll() with a bounded timeout and nothing blocks forever.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "relay.h"
#include "spawn.h"

namespace chorus::run {

// SIGINT/SIGTERM/SIGHUP/SIGCHLD write to a self-pipe; SIGPIPE is ignored. Call once.
void install_signal_handlers();
// Outside an attempt: waits up to `timeout` for SIGINT/SIGTERM/SIGHUP; true if one came.
bool wait_for_interrupt(std::chrono::milliseconds timeout);

struct AttemptResult {
  bool success = false;
  int interrupted_by = 0;  // the signal that stopped chorusrun, 0 if none
  int exit_code = 0;       // what chorusrun should exit with if this is the last attempt
  std::string failure;     // what went wrong, for the final message
};

// What one child's exit means for the attempt.
struct ExitDecision {
  enum class Action {
    kContinue,  // nothing to do (a rank that finished, a task the job can do without)
    kRestart,   // start this child again, alone (SuperviseOptions::respawn)
    kFail,      // the attempt failed: stop every child now; exit with this child's status
    kFinish,    // the job succeeded: the others get the grace period to end on their own,
                // then SIGTERM, then SIGKILL after another grace period
  };
  Action action = Action::kContinue;
  std::string message;  // said on stderr when not empty
};

// `what` describes the exit ("rank 2 on localhost (pid 42) ended with exit code 3").
// Called only while the attempt runs, not for children that end while it is being stopped.
using ExitPolicy = std::function<ExitDecision(const Child& child, const std::string& what)>;
// Starts a replacement for `child`, appending its stdout and stderr relays to `relays`.
using Respawn =
    std::function<Child(const Child& child, std::vector<std::unique_ptr<LineRelay>>& relays)>;

// What a periodic look at the job (SuperviseOptions::tick) asks for.
struct TickResult {
  std::vector<Child> started;  // new children, their relays appended to the relays given
  std::string failure;         // not empty: the attempt failed (exit code 1), stop everyone
  bool waiting = false;        // the job is not over even when every child has exited
};
using Tick = std::function<TickResult(std::vector<std::unique_ptr<LineRelay>>& relays)>;

// The policy of a collective job: any failed rank fails the attempt.
ExitDecision rank_exit_policy(const Child& child, const std::string& what);

struct SuperviseOptions {
  std::chrono::milliseconds grace{5000};
  std::chrono::milliseconds start_timeout{0};  // 0: ranks are not required to join
  bool verbose = false;
  // Returns the ranks that have not joined the rendezvous yet (called a few times a second
  // until it returns none, and once more at the start timeout).
  std::function<std::vector<int>()> missing_ranks;
  ExitPolicy decide = rank_exit_policy;
  Respawn respawn;  // required when `decide` may answer kRestart
  // Called on every turn of the loop (a few times a second at least) until the attempt
  // stops or finishes: an elastic job's host discovery and below-minimum deadline.
  Tick tick;
  // Told of every child's exit, also while the attempt is being stopped (the dashboard).
  std::function<void(const Child& child, const std::string& what)> on_exit;
};

class Supervisor {
 public:
  // One relay pair (stdout, stderr) per child, in the same order.
  Supervisor(std::vector<Child> children, std::vector<std::unique_ptr<LineRelay>> relays,
             SuperviseOptions options);
  ~Supervisor();

  // Runs until every child has exited and its output is drained.
  AttemptResult run();

 private:
  void poll_once(int timeout_ms);
  void drain_signals();
  void read_output(size_t index, bool is_err);
  void reap();
  void on_exit(size_t index);
  void restart(size_t index);
  void check_joined();
  void run_tick();
  void stop(const std::string& why);
  void finish();
  void escalate();
  void signal_all(int sig);
  bool all_exited() const;
  bool output_open() const;

  std::vector<Child> children_;
  std::vector<std::unique_ptr<LineRelay>> relays_;
  SuperviseOptions options_;
  AttemptResult result_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point term_at_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point kill_at_;
  std::chrono::steady_clock::time_point last_join_check_;
  bool stopping_ = false;   // the attempt failed or was interrupted
  bool finishing_ = false;  // the job succeeded; the remaining children are being ended
  bool term_sent_ = false;
  bool killed_ = false;
  bool joined_ = false;
  bool waiting_ = false;  // the last tick said the job goes on without children
};

}  // namespace chorus::run
