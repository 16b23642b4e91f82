// One worker connection, on its own thread: handshake, "hello", then a loop that sends
// whatever the Scheduler allows (a step, the shutdown frame), pings, and reads replies.
// A worker is dead when its connection closes or fails, when it sends a malformed frame,
// or when it sends nothing (not even a pong) for heartbeat_timeout; the worker answers
// pings from a thread of its own, so a long step is never mistaken for a dead worker.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chorus/error.h"
#include "ps/coordinator/coordinator_impl.h"
#include "rendezvous/auth.h"
#include "util/env.h"
#include "util/log.h"
#include "util/net.h"

namespace chorus::ps {

using coordinator::Conn;
using coordinator::Msg;
using rendezvous::Frame;
using std::chrono::milliseconds;

namespace {

// A peer that hung up or reset (checked when another connection claims its index), or
// that does so within `wait_ms`.
bool peer_gone(int fd, int wait_ms = 0) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, wait_ms) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// A worker that restarts at once can say hello before this side has seen its old
// connection close: on loopback the close travels through a softirq that a loaded host can
// delay by milliseconds. Before calling an index taken, its old connection gets this long
// to show that it is gone.
constexpr int kTakeoverGraceMs = 200;

constexpr const char* kShutdownRefusal = "shutdown";

int ms_until(Clock::time_point t) {
  auto left = std::chrono::ceil<milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX));
}

}  // namespace

void Coordinator::Impl::serve(Conn& c) {
  try {
    int index = read_hello(c);
    if (index >= 0 && enroll(c, index)) session(c);
  } catch (const std::exception& e) {  // bad handshake or frame, dead or silent worker, OOM
    if (!server.stopping())
      CHORUS_LOG(kWarning, "coordinator") << "dropped " << c.peer << ": " << e.what();
  }
  retire(c);
  // ConnectionServer now shutdown()s the socket, then runs on_closed (enrolled = false),
  // then marks the record done.
}

// The handshake and the hello share one deadline; -1 when the peer left cleanly.
int Coordinator::Impl::read_hello(Conn& c) {
  Deadline deadline = Deadline::after(options.handshake_timeout);
  rendezvous::authenticate_server(c.fd.get(), secret, coordinator::kPurpose, deadline);
  Frame hello;
  if (!coordinator::receive(c.fd.get(), deadline, "coordinator hello", hello)) return -1;
  return static_cast<int>(coordinator::parse_hello(hello));
}

// Registers `c` as worker `index`; returns why not ("" when registered, kShutdownRefusal
// after shutdown_workers()).
std::string Coordinator::Impl::claim(Conn& c, int index) {
  for (int attempt = 0;; ++attempt) {
    net::Fd old;  // a second handle on the owner's socket, to wait on without the lock
    {
      std::lock_guard<std::mutex> lock(mu);
      if (shutting_down) return kShutdownRefusal;
      auto it = owners.find(index);
      if (it != owners.end() && !peer_gone(it->second->fd.get())) {
        if (attempt > 0) {
          return "worker " + std::to_string(index) + " is already connected from " +
                 it->second->peer + " (two workers with one index?)";
        }
        old = net::Fd(::dup(it->second->fd.get()));
      } else {
        if (it != owners.end()) {
          // Its old connection is dead but its thread has not noticed yet: take over now.
          scheduler.remove_worker(index, Clock::now());
          ::shutdown(it->second->fd.get(), SHUT_RDWR);  // that thread ends, finds itself replaced
        }
        owners[index] = &c;
        c.index = index;
        c.enrolled = true;
        scheduler.add_worker(index);
        wake_workers();
        cv.notify_all();
        return {};
      }
    }
    peer_gone(old.get(), kTakeoverGraceMs);  // returns early once it hangs up
  }
}

// Registers the worker and welcomes it, or tells it why not. Returns whether the session
// goes on.
bool Coordinator::Impl::enroll(Conn& c, int index) {
  Deadline deadline = Deadline::after(options.handshake_timeout);
  std::string refusal = claim(c, index);
  if (refusal == kShutdownRefusal) {
    coordinator::send(c.fd.get(), Msg::kShutdown, {}, deadline, "coordinator shutdown");
    return false;
  }
  if (!refusal.empty()) {
    CHORUS_LOG(kWarning, "coordinator") << "refused " << c.peer << ": " << refusal;
    coordinator::send(c.fd.get(), Msg::kReject, coordinator::encode_text(refusal), deadline,
                      "coordinator reject");
    return false;
  }
  coordinator::send(c.fd.get(), Msg::kWelcome, coordinator::encode_welcome(heartbeat_timeout),
                    deadline, "coordinator welcome");
  CHORUS_LOG(kInfo, "coordinator") << "worker " << index << " joined from " << c.peer;
  return true;
}

void Coordinator::Impl::session(Conn& c) {
  const int fd = c.fd.get();
  auto last_heard = Clock::now();
  auto next_ping = last_heard + ping_interval;
  for (;;) {
    act(c);
    if (Clock::now() >= next_ping) {
      coordinator::send(fd, Msg::kPing, {}, Deadline::after(default_timeout()), "coordinator ping");
      next_ping = Clock::now() + ping_interval;
    }
    if (wait_readable(c, ms_until(std::min(next_ping, last_heard + heartbeat_timeout)))) {
      Frame frame;
      if (!coordinator::receive(fd, Deadline::after(default_timeout()), "worker reply", frame)) {
        return;  // the worker closed its end: gone (after a shutdown, or it quit)
      }
      handle(c, frame);
      last_heard = Clock::now();
    } else if (server.stopping()) {
      return;
    }
    if (Clock::now() - last_heard >= heartbeat_timeout) {
      CHORUS_THROW(TimeoutError, "worker ", c.index, " sent nothing for ",
                   heartbeat_timeout.count(), " ms (heartbeat_timeout): presumed dead");
    }
  }
}

// Waits for a frame, a wake-up or stop(); true when the socket has something to read.
bool Coordinator::Impl::wait_readable(Conn& c, int timeout_ms) {
  pollfd fds[3] = {
      {c.fd.get(), POLLIN, 0}, {c.wake.get(), POLLIN, 0}, {server.wake_fd(), POLLIN, 0}};
  int rc = ::poll(fds, 3, timeout_ms);
  if (rc < 0 && errno != EINTR) CHORUS_THROW(IoError, "poll failed: ", std::strerror(errno));
  if (rc <= 0 || server.stopping()) return false;
  if (fds[1].revents & POLLIN) {
    uint64_t count;
    [[maybe_unused]] ssize_t n = ::read(c.wake.get(), &count, sizeof(count));
  }
  return fds[0].revents != 0;
}

// Sends the shutdown frame once it is asked for, else the next step the rules allow.
void Coordinator::Impl::act(Conn& c) {
  std::shared_ptr<coordinator::Step> step;
  bool say_bye = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!owns(c)) CHORUS_THROW(IoError, "worker ", c.index, " was replaced by a new connection");
    if (shutting_down) {
      say_bye = !c.bye_sent;
    } else {
      step = scheduler.take(c.index);
    }
  }
  Deadline deadline = Deadline::after(default_timeout());
  if (say_bye) {
    coordinator::send(c.fd.get(), Msg::kShutdown, {}, deadline, "coordinator shutdown");
    c.bye_sent = true;
  }
  if (step) {
    coordinator::StepMsg msg{step->id, step->function, step->argument};
    coordinator::send(c.fd.get(), Msg::kStep, coordinator::encode_step(msg), deadline,
                      "coordinator step");
  }
}

void Coordinator::Impl::handle(Conn& c, const Frame& frame) {
  switch (static_cast<Msg>(frame.type)) {
    case Msg::kPong:
      coordinator::check_empty(frame);
      return;
    case Msg::kResult:
    case Msg::kError: {
      coordinator::ReplyMsg reply = coordinator::parse_reply(frame);
      std::lock_guard<std::mutex> lock(mu);
      if (!owns(c)) CHORUS_THROW(IoError, "worker ", c.index, " was replaced by a new connection");
      scheduler.complete(c.index, reply);
      wake_workers();  // the slowest worker's count may have moved
      cv.notify_all();
      return;
    }
    default:
      CHORUS_THROW(IoError, "coordinator protocol: unexpected message ", frame.type,
                   " from worker ", c.index);
  }
}

bool Coordinator::Impl::owns(const Conn& c) const {
  auto it = owners.find(c.index);
  return it != owners.end() && it->second == &c;
}

// The worker is gone: its running step goes back to the queue (or fails once the
// coordinator is shutting down, as no worker would take it).
void Coordinator::Impl::retire(Conn& c) {
  std::lock_guard<std::mutex> lock(mu);
  if (c.index < 0 || !owns(c)) return;
  owners.erase(c.index);
  std::exception_ptr error;
  if (shutting_down) {
    error = CHORUS_UNAVAILABLE_PTR("worker ", c.index,
                                   " left after shutdown_workers() during the step");
  }
  scheduler.remove_worker(c.index, Clock::now(), error);
  wake_workers();
  cv.notify_all();
  CHORUS_LOG(kInfo, "coordinator") << "worker " << c.index << " left (" << c.peer << ")";
}

}  // namespace chorus::ps
