// The worker side: serve_coordinator() connects, says hello, then runs steps on the calling
// thread while a reader thread answers pings and queues what the coordinator sends. The
// reader is what keeps a long step from looking like a dead worker, and what notices a
// silent coordinator (nothing for heartbeat_timeout) while a step runs.
#include <poll.h>
#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "chorus/error.h"
#include "chorus/ps/coordinator.h"
#include "ps/coordinator/protocol.h"
#include "rendezvous/auth.h"
#include "util/env.h"
#include "util/net.h"

namespace chorus::ps {

using coordinator::Msg;
using coordinator::ReplyMsg;
using coordinator::StepMsg;
using rendezvous::Frame;
using std::chrono::milliseconds;

namespace {

// The connection once welcomed. Lock order: mu_ is never held while writing; write_mu_
// serialises the reader's pongs with the caller's replies.
class WorkerLink {
 public:
  WorkerLink(net::Fd fd, milliseconds heartbeat) : fd_(std::move(fd)), heartbeat_(heartbeat) {
    reader_ = std::thread([this] { read_loop(); });
  }
  ~WorkerLink() {
    ::shutdown(fd_.get(), SHUT_RDWR);  // wakes the reader if it still waits
    reader_.join();
  }
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  // The next step; nullopt once the coordinator said shutdown and every step it sent
  // before that has run. Throws why the connection failed.
  std::optional<StepMsg> next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !steps_.empty() || shutdown_ || failure_; });
    if (failure_ && !shutdown_) std::rethrow_exception(failure_);
    if (steps_.empty()) return std::nullopt;
    StepMsg step = std::move(steps_.front());
    steps_.pop_front();
    running_ = true;
    running_id_ = step.id;
    return step;
  }

  // Sends a reply. After a shutdown frame a lost reply is no error: we are leaving anyway.
  void reply(const ReplyMsg& reply) {
    Msg type = reply.ok ? Msg::kResult : Msg::kError;
    {
      // Before the reply leaves: from then on the coordinator may send the next step.
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
    }
    try {
      send(type, coordinator::encode_reply(reply));
    } catch (const Error&) {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return;
      if (failure_) std::rethrow_exception(failure_);  // says why better than EPIPE
      throw;
    }
  }

 private:
  void send(Msg type, const std::string& payload) {
    std::lock_guard<std::mutex> lock(write_mu_);
    coordinator::send(fd_.get(), type, payload, Deadline::after(default_timeout()), "worker reply");
  }

  void read_loop() {
    try {
      for (;;) read_one();  // ends by throwing: EOF, silence or garbage
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      failure_ = std::current_exception();
    }
    // Drop the connection now, not after the running step: a broken or hostile coordinator
    // gets nothing more from us (the fd is closed by the destructor).
    ::shutdown(fd_.get(), SHUT_RDWR);
    cv_.notify_all();
  }

  // Handles one message. After the shutdown frame it goes on answering pings, so a step
  // still running is not cut off as a silent worker; the loop ends when the socket closes.
  void read_one() {
    if (!net::wait_fd(fd_.get(), POLLIN, Deadline::after(heartbeat_))) {
      CHORUS_THROW(TimeoutError, "the coordinator at ", net::peer_name(fd_.get()),
                   " sent nothing for ", heartbeat_.count(), " ms: presumed gone");
    }
    Frame frame;
    if (!coordinator::receive(fd_.get(), Deadline::after(default_timeout()), "coordinator message",
                              frame)) {
      CHORUS_THROW(IoError, "the coordinator closed the connection without a shutdown");
    }
    switch (static_cast<Msg>(frame.type)) {
      case Msg::kPing:
        coordinator::check_empty(frame);
        send(Msg::kPong, {});
        return;
      case Msg::kStep:
        push(coordinator::parse_step(frame));
        return;
      case Msg::kShutdown:
        coordinator::check_empty(frame);
        mark_shutdown();
        return;
      default:
        CHORUS_THROW(IoError, "coordinator protocol: unexpected message ", frame.type);
    }
  }

  // The coordinator sends a worker its next step only after the reply to the last one
  // (Scheduler::take), so a worker holds at most one: a second would be a broken or
  // hostile coordinator, and queueing it would let one buffer up to 64 MiB per frame
  // without bound.
  void push(StepMsg step) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (running_ || !steps_.empty()) {
        CHORUS_THROW(IoError, "coordinator protocol: step ", step.id, " arrived while step ",
                     running_ ? running_id_ : steps_.front().id, " is still ",
                     running_ ? "running" : "queued", " (a worker runs one step at a time)");
      }
      steps_.push_back(std::move(step));
    }
    cv_.notify_all();
  }

  void mark_shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
  }

  net::Fd fd_;
  const milliseconds heartbeat_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StepMsg> steps_;   // guarded by mu_; at most one step
  bool running_ = false;        // guarded by mu_: a step was taken and not yet replied to
  int64_t running_id_ = 0;      // guarded by mu_: its id
  bool shutdown_ = false;       // guarded by mu_
  std::exception_ptr failure_;  // guarded by mu_
  std::thread reader_;          // last: started once everything above exists
};

void set_error(ReplyMsg& reply, const char* kind, const std::string& message) {
  reply.ok = false;
  reply.kind = kind;
  reply.message = message.substr(0, coordinator::kMaxMessageBytes);
}

// Runs one step; every exception becomes the step's error, so the worker keeps serving.
ReplyMsg run_step(const StepMsg& step, const StepHandler& handler) {
  ReplyMsg reply;
  reply.id = step.id;
  try {
    reply.result = handler(step.function, step.argument);
    if (reply.result.size() > coordinator::kMaxArgumentBytes) {
      set_error(reply, coordinator::kKindError,
                "result of '" + step.function + "' is " + std::to_string(reply.result.size()) +
                    " bytes, over the limit of " + std::to_string(coordinator::kMaxArgumentBytes));
      reply.result.clear();
    }
  } catch (const UnavailableError& e) {
    set_error(reply, coordinator::kKindUnavailable, e.what());
  } catch (const std::exception& e) {
    set_error(reply, coordinator::kKindError, e.what());
  } catch (...) {
    set_error(reply, coordinator::kKindError, "step '" + step.function + "' threw a non-exception");
  }
  return reply;
}

// Connects, authenticates and says hello. Returns the heartbeat timeout from the welcome,
// or nullopt when the coordinator answered with shutdown.
std::optional<milliseconds> join_coordinator(int fd, const std::string& address, int index,
                                             const Secret& secret, Deadline deadline) {
  rendezvous::authenticate_client(fd, secret, coordinator::kPurpose, deadline);
  coordinator::send(fd, Msg::kHello, coordinator::encode_hello(static_cast<uint32_t>(index)),
                    deadline, "worker hello");
  Frame answer;
  if (!coordinator::receive(fd, deadline, "coordinator welcome", answer)) {
    CHORUS_THROW(IoError, "the coordinator at ", address, " closed the connection of worker ",
                 index, " before welcoming it");
  }
  switch (static_cast<Msg>(answer.type)) {
    case Msg::kShutdown:
      return std::nullopt;
    case Msg::kReject:
      CHORUS_THROW(InvalidArgument, "the coordinator at ", address, " refused worker ", index, ": ",
                   coordinator::parse_text(answer));
    default:
      return coordinator::parse_welcome(answer);
  }
}

}  // namespace

void serve_coordinator(const std::string& address, int worker_index, const Secret& secret,
                       const StepHandler& handler, milliseconds connect_timeout) {
  CHORUS_CHECK_ARG(
      worker_index >= 0 && static_cast<uint32_t>(worker_index) <= coordinator::kMaxWorkerIndex,
      "worker index ", worker_index, " is out of range");
  CHORUS_CHECK_ARG(handler != nullptr, "serve_coordinator needs a step handler");
  CHORUS_CHECK_ARG(!secret.empty(), "serve_coordinator needs the job secret");
  net::Endpoint endpoint = net::Endpoint::parse(address);
  Deadline deadline =
      Deadline::after(connect_timeout.count() > 0 ? connect_timeout : default_timeout());
  net::Fd fd = net::connect_tcp(endpoint, deadline);  // retries refused attempts, backing off
  auto heartbeat = join_coordinator(fd.get(), address, worker_index, secret, deadline);
  if (!heartbeat) return;
  WorkerLink link(std::move(fd), *heartbeat);
  while (auto step = link.next()) link.reply(run_step(*step, handler));
}

}  // namespace chorus::ps
