// The Coordinator's lifecycle, its acceptor thread and the calls users make. The per-worker
// protocol is in connection.cc; the dispatch rules in scheduler.cc.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "chorus/error.h"
#include "ps/coordinator/coordinator_impl.h"
#include "util/env.h"
#include "util/log.h"

namespace chorus::ps {

using coordinator::Conn;
using coordinator::Step;
using std::chrono::milliseconds;

namespace {

// How long the destructor lets workers leave on their own after the shutdown frame, so
// they read it before the socket closes. Workers in the middle of a step are cut off.
constexpr milliseconds kGoodbyeGrace{2000};
// The acceptor wakes at least this often to check no_worker_timeout and reap threads.
constexpr milliseconds kAcceptorTick{250};

milliseconds or_default(milliseconds value) {
  return value.count() > 0 ? value : default_timeout();
}

milliseconds ping_interval_for(milliseconds heartbeat) {
  return std::clamp(heartbeat / 4, milliseconds(1), milliseconds(5000));
}

}  // namespace

Coordinator::Impl::Impl(Secret s, CoordinatorOptions o)
    : secret(std::move(s)),
      options(o),
      heartbeat_timeout(or_default(o.heartbeat_timeout)),
      ping_interval(ping_interval_for(heartbeat_timeout)),
      no_worker_timeout(or_default(o.no_worker_timeout)),
      scheduler(o.max_staleness, o.max_attempts, Clock::now()),
      server(server_options(),
             [this](rendezvous::Connection& c) { serve(static_cast<Conn&>(c)); }) {}

rendezvous::ConnectionServer::Options Coordinator::Impl::server_options() {
  rendezvous::ConnectionServer::Options so;
  so.log_tag = "coordinator";
  so.max_clients = options.max_clients;
  so.poll_timeout_ms = [this] { return check_no_worker_timeout(); };
  so.make_connection = [] { return std::make_unique<Conn>(); };
  so.on_accept = [this](rendezvous::Connection& c) { return prepare(static_cast<Conn&>(c)); };
  so.on_closed = [](rendezvous::Connection& c) { static_cast<Conn&>(c).enrolled = false; };
  return so;
}

void Coordinator::Impl::start(const std::string& host, uint16_t port) {
  CHORUS_CHECK_ARG(!secret.empty(), "Coordinator needs a job secret");
  CHORUS_CHECK_ARG(options.max_attempts > 0, "CoordinatorOptions.max_attempts must be > 0");
  CHORUS_CHECK_ARG(options.max_clients > 0, "CoordinatorOptions.max_clients must be > 0");
  CHORUS_CHECK_ARG(heartbeat_timeout.count() <= UINT32_MAX, "heartbeat_timeout is too long");
  server.start(host, port);
}

void Coordinator::Impl::stop() {
  request_shutdown();
  wait_for_goodbyes();
  server.stop();
  std::lock_guard<std::mutex> lock(mu);
  scheduler.fail_all(
      CHORUS_UNAVAILABLE_PTR("the coordinator was destroyed before the step finished"));
  cv.notify_all();
}

// Workers that got the shutdown frame close their end; waiting a little for that means a
// worker never sees our close before the frame.
void Coordinator::Impl::wait_for_goodbyes() {
  Deadline deadline = Deadline::after(kGoodbyeGrace);
  while (!deadline.expired()) {
    bool any = server.any_connection([](const rendezvous::Connection& c) {
      return static_cast<const Conn&>(c).enrolled.load();
    });
    if (!any) return;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

int Coordinator::Impl::check_no_worker_timeout() {
  std::lock_guard<std::mutex> lock(mu);
  auto deadline = scheduler.no_worker_deadline(no_worker_timeout);
  if (!deadline) return static_cast<int>(kAcceptorTick.count());
  auto now = Clock::now();
  if (now < *deadline) {
    auto left = std::chrono::ceil<milliseconds>(*deadline - now);
    return static_cast<int>(std::min(left, kAcceptorTick).count());
  }
  scheduler.fail_queued(
      CHORUS_UNAVAILABLE_PTR("no worker connected for ", no_worker_timeout.count() / 1000.0, " s"));
  cv.notify_all();
  return static_cast<int>(kAcceptorTick.count());
}

bool Coordinator::Impl::prepare(Conn& c) {
  c.wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!c.wake.valid()) {
    CHORUS_LOG(kWarning, "coordinator") << "refused " << c.peer << ": eventfd failed";
    return false;
  }
  return true;
}

void Coordinator::Impl::request_shutdown() {
  std::lock_guard<std::mutex> lock(mu);
  if (shutting_down) return;
  shutting_down = true;
  scheduler.fail_queued(
      CHORUS_UNAVAILABLE_PTR("the coordinator shut its workers down before the step ran"));
  wake_workers();
  cv.notify_all();
}

void Coordinator::Impl::wake_workers() {
  uint64_t one = 1;
  for (auto& [index, conn] : owners) {
    [[maybe_unused]] ssize_t n = ::write(conn->wake.get(), &one, sizeof(one));
  }
}

Coordinator::Coordinator(const std::string& host, uint16_t port, Secret secret,
                         CoordinatorOptions options)
    : impl_(std::make_unique<Impl>(std::move(secret), options)) {
  impl_->start(host, port);
}

Coordinator::~Coordinator() { impl_->stop(); }

uint16_t Coordinator::port() const { return impl_->server.port(); }

RemoteValue Coordinator::schedule(const std::string& function, const std::string& argument) {
  CHORUS_CHECK_ARG(!function.empty() && function.size() <= coordinator::kMaxFunctionBytes,
                   "step function name must be 1..", coordinator::kMaxFunctionBytes, " bytes, got ",
                   function.size());
  CHORUS_CHECK_ARG(argument.size() <= coordinator::kMaxArgumentBytes, "argument of '", function,
                   "' is ", argument.size(), " bytes, over the limit of ",
                   coordinator::kMaxArgumentBytes);
  auto step = std::make_shared<Step>();
  step->function = function;
  step->argument = argument;
  step->value = std::make_shared<RemoteValue::State>();
  std::lock_guard<std::mutex> lock(impl_->mu);
  step->id = impl_->next_step_id++;
  if (impl_->shutting_down) {
    impl_->scheduler.push_failed(
        step, CHORUS_UNAVAILABLE_PTR("step '", function, "' scheduled after shutdown_workers()"));
  } else {
    impl_->scheduler.push(step, Clock::now());
    impl_->wake_workers();
  }
  return RemoteValue(step->value);
}

// No deadline: every outstanding step ends (see RemoteValue::get()).
void Coordinator::join() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->scheduler.outstanding() == 0; });
  if (auto error = impl_->scheduler.take_first_error()) std::rethrow_exception(error);
}

void Coordinator::wait_for_workers(int n, milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  bool ok = impl_->cv.wait_for(lock, timeout, [&] { return impl_->scheduler.live_workers() >= n; });
  if (!ok) {
    CHORUS_THROW(TimeoutError, "only ", impl_->scheduler.live_workers(), " of ", n,
                 " workers connected to the coordinator after ", timeout.count(), " ms");
  }
}

bool Coordinator::wait_for_workers_seen(int n, milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->scheduler.seen_workers() >= n; });
}

int Coordinator::num_workers_seen() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->scheduler.seen_workers();
}

int Coordinator::num_live_workers() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->scheduler.live_workers();
}

void Coordinator::shutdown_workers() { impl_->request_shutdown(); }

}  // namespace chorus::ps
