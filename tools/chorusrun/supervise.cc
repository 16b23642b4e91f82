#include "supervise.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus::run {
namespace {

using Clock = std::chrono::steady_clock;
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  char c = static_cast<char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &c, 1);
  errno = saved;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

bool exited_ok(const Child& c) { return WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0; }

// "rank 3" for a collective rank, "mpirun", or a task's own label ("worker 1").
std::string child_name(const Child& c) {
  bool numeric = !c.label.empty() && c.label.find_first_not_of("0123456789") == std::string::npos;
  return numeric ? "rank " + c.label : c.label;
}

}  // namespace

ExitDecision rank_exit_policy(const Child& child, const std::string& what) {
  if (exited_ok(child)) return {};
  return {ExitDecision::Action::kFail, what + "; stopping the other ranks"};
}

void install_signal_handlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) std::perror("chorusrun: pipe");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

bool wait_for_interrupt(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (auto now = Clock::now(); now < until; now = Clock::now()) {
    pollfd p{g_signal_pipe[0], POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, 1000))) <= 0) continue;
    char sigs[64];
    ssize_t n = ::read(g_signal_pipe[0], sigs, sizeof(sigs));
    for (ssize_t i = 0; i < n; ++i) {
      if (sigs[i] != SIGCHLD) return true;
    }
  }
  return false;
}

Supervisor::Supervisor(std::vector<Child> children, std::vector<std::unique_ptr<LineRelay>> relays,
                       SuperviseOptions options)
    : children_(std::move(children)), relays_(std::move(relays)), options_(std::move(options)) {
  started_ = last_join_check_ = Clock::now();
  joined_ = options_.start_timeout.count() == 0 || !options_.missing_ranks;
}

Supervisor::~Supervisor() {
  for (Child& c : children_) {
    close_fd(c.out_fd);
    close_fd(c.err_fd);
    close_fd(c.ctl_fd);
  }
}

AttemptResult Supervisor::run() {
  Clock::time_point drained_by = Clock::time_point::max();
  while (!all_exited() || output_open() || (waiting_ && !stopping_)) {
    poll_once(50);
    drain_signals();
    reap();
    if (!joined_) check_joined();
    run_tick();
    escalate();
    // A rank's own children may hold its pipes open after it exited: give them 2 s.
    if (all_exited() && !(waiting_ && !stopping_) && drained_by == Clock::time_point::max())
      drained_by = Clock::now() + std::chrono::seconds(2);
    if (Clock::now() >= drained_by) break;
  }
  for (auto& relay : relays_) relay->finish();
  result_.success = !stopping_;
  return result_;
}

void Supervisor::poll_once(int timeout_ms) {
  std::vector<pollfd> fds = {{g_signal_pipe[0], POLLIN, 0}};
  std::vector<std::pair<size_t, bool>> owners;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].out_fd >= 0)
      fds.push_back({children_[i].out_fd, POLLIN, 0}), owners.push_back({i, false});
    if (children_[i].err_fd >= 0)
      fds.push_back({children_[i].err_fd, POLLIN, 0}), owners.push_back({i, true});
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (size_t k = 1; k < fds.size(); ++k) {
    if (fds[k].revents != 0) read_output(owners[k - 1].first, owners[k - 1].second);
  }
}

void Supervisor::drain_signals() {
  char sigs[64];
  ssize_t n;
  while ((n = ::read(g_signal_pipe[0], sigs, sizeof(sigs))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      int sig = sigs[i];
      if (sig == SIGCHLD || result_.interrupted_by != 0) continue;
      result_.interrupted_by = sig;
      result_.exit_code = 128 + sig;
      stop(std::string("interrupted by ") + (sig == SIGINT    ? "SIGINT"
                                             : sig == SIGTERM ? "SIGTERM"
                                                              : "SIGHUP"));
    }
  }
}

void Supervisor::read_output(size_t index, bool is_err) {
  Child& c = children_[index];
  int& fd = is_err ? c.err_fd : c.out_fd;
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    relays_[2 * index + (is_err ? 1 : 0)]->finish();
    close_fd(fd);
    return;
  }
  relays_[2 * index + (is_err ? 1 : 0)]->feed(buf, static_cast<size_t>(n));
}

void Supervisor::reap() {
  // By index: a restart appends to children_ while this loop runs.
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (c.exited) continue;
    int status = 0;
    pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    if (r != c.pid) continue;
    c.exited = true;
    c.status = status;
    close_fd(c.ctl_fd);
    on_exit(i);
  }
}

void Supervisor::on_exit(size_t index) {
  const Child& c = children_[index];
  std::string what = child_name(c) + " on " + c.host + " (pid " + std::to_string(c.pid) +
                     ") ended with " + describe_status(c.status, c.remote);
  if (options_.on_exit) options_.on_exit(c, what);
  ExitDecision d;
  if (!stopping_ && !finishing_) d = options_.decide(c, what);
  if (!d.message.empty()) {
    say(d.message);
  } else if (options_.verbose) {
    say(what);
  }
  switch (d.action) {
    case ExitDecision::Action::kContinue:
      break;
    case ExitDecision::Action::kRestart:
      restart(index);
      break;
    case ExitDecision::Action::kFail:
      result_.exit_code = status_exit_code(c.status);
      stop(what);
      break;
    case ExitDecision::Action::kFinish:
      finish();
      break;
  }
}

// The old entry stays (exited) until its pipes are drained; the new child is appended with
// its own relays, so relays_[2 * i] keeps matching children_[i].
void Supervisor::restart(size_t index) {
  Child fresh = options_.respawn(children_[index], relays_);
  children_.push_back(std::move(fresh));
}

void Supervisor::run_tick() {
  if (!options_.tick || stopping_ || finishing_) return;
  TickResult t = options_.tick(relays_);
  waiting_ = t.waiting;
  for (Child& c : t.started) children_.push_back(std::move(c));
  if (t.failure.empty()) return;
  say(t.failure + "; stopping the job");
  result_.exit_code = 1;
  stop(t.failure);
}

void Supervisor::check_joined() {
  auto now = Clock::now();
  bool deadline = now - started_ >= options_.start_timeout;
  if (!deadline && now - last_join_check_ < std::chrono::milliseconds(200)) return;
  last_join_check_ = now;
  std::vector<int> missing;
  try {
    missing = options_.missing_ranks();
  } catch (const std::exception& e) {
    if (!deadline) return;
    say(std::string("cannot ask the store which ranks joined: ") + e.what());
    missing = {-1};
  }
  if (missing.empty()) {
    joined_ = true;
    return;
  }
  if (!deadline || stopping_) return;
  joined_ = true;  // reported once
  std::string names;
  for (int r : missing) {
    names += (names.empty() ? "" : ", ") + std::to_string(r);
    for (const Child& c : children_) {
      if (c.label == std::to_string(r)) names += " (on " + c.host + ")";
    }
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%g", options_.start_timeout.count() / 1000.0);
  std::string what = "ranks not joined the rendezvous within the start timeout (" +
                     std::string(seconds) + " s): " + names;
  say(what + "; stopping the job");
  result_.exit_code = 1;
  stop(what);
}

void Supervisor::stop(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  result_.failure = why;
  term_at_ = Clock::now();
  escalate();
}

void Supervisor::finish() {
  finishing_ = true;
  term_at_ = Clock::now() + options_.grace;
}

// SIGTERM once term_at_ has come, SIGKILL a grace period later.
void Supervisor::escalate() {
  auto now = Clock::now();
  if (!term_sent_ && now >= term_at_) {
    if (finishing_ && !stopping_ && options_.verbose)
      say("grace period over: SIGTERM to the remaining tasks");
    signal_all(SIGTERM);
    term_sent_ = true;
    kill_at_ = now + options_.grace;
  }
  if (term_sent_ && !killed_ && now >= kill_at_) {
    if (options_.verbose) say("grace period over: SIGKILL to the remaining ranks");
    signal_all(SIGKILL);
    killed_ = true;
  }
}

void Supervisor::signal_all(int sig) {
  for (Child& c : children_) {
    if (c.exited) continue;
    if (c.ctl_fd >= 0) {
      std::string line = sig == SIGKILL ? "KILL\n" : "TERM\n";
      write_fully(c.ctl_fd, line.data(), line.size());
    }
    // A remote rank gets its grace period on its host: killing ssh now would cut the
    // connection, and the remote side kills the rank at once when its input ends.
    if (c.remote && sig != SIGKILL) continue;
    // The local process group: the rank itself (or its ssh / mpirun) and its children.
    ::kill(-c.pid, sig);
  }
}

bool Supervisor::all_exited() const {
  for (const Child& c : children_) {
    if (!c.exited) return false;
  }
  return true;
}

bool Supervisor::output_open() const {
  for (const Child& c : children_) {
    if (c.out_fd >= 0 || c.err_fd >= 0) return true;
  }
  return false;
}

}  // namespace chorus::run
