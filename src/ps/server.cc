// ParameterServer: one acceptor thread plus one thread per authenticated connection (at
// most options.max_clients), the shape of TcpStoreServer: a slow or hostile peer is
// confined to its own thread, the handshake has its own deadline, and a request must
// arrive whole within CHORUS_TIMEOUT_SECONDS once its first byte has.
// Shutdown: a self-pipe wakes every poll(), PsState::stop wakes waiting pulls, and
// shutdown() on each socket interrupts transfers in progress.
// Lock order: conns_mu is never held while taking PsState's locks.
#include "chorus/ps/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <system_error>

#include "chorus/error.h"
#include "rendezvous/auth.h"
#include "server_requests.h"
#include "util/env.h"
#include "util/log.h"

namespace chorus::ps {

struct ParameterServer::Impl {
  Impl(Secret s, ServerOptions o) : secret(std::move(s)), options(o) {}

  void start(const std::string& host, uint16_t port);
  void stop();
  void accept_loop();
  void accept_one();
  void reap_finished();
  void serve(Connection& conn);
  bool wait_for_request(int fd);
  void request_shutdown();

  Secret secret;
  ServerOptions options;
  net::Fd listener;
  net::Fd wake_read, wake_write;  // self-pipe: written once at stop, never drained
  PsState state;
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;  // serialises stop()
  std::mutex exit_mu;
  std::condition_variable exit_cv;
  bool exit_requested = false;  // guarded by exit_mu
  std::mutex conns_mu;
  std::list<std::unique_ptr<Connection>> conns;  // guarded by conns_mu
  std::thread acceptor;
};

void ParameterServer::Impl::start(const std::string& host, uint16_t port) {
  CHORUS_CHECK_ARG(!secret.empty(), "ParameterServer needs a job secret");
  CHORUS_CHECK_ARG(options.max_clients > 0, "ServerOptions.max_clients must be > 0");
  listener = net::listen_tcp(host, port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    CHORUS_THROW(IoError, "pipe2 failed: ", std::strerror(errno));
  }
  wake_read.reset(pipe_fds[0]);
  wake_write.reset(pipe_fds[1]);
  acceptor = std::thread([this] { accept_loop(); });
}

void ParameterServer::Impl::stop() {
  std::lock_guard<std::mutex> once(stop_mu);
  if (!stopping.exchange(true)) {
    char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_write.get(), &byte, 1);
  }
  state.stop();
  if (acceptor.joinable()) acceptor.join();  // no connection is added after this
  std::list<std::unique_ptr<Connection>> all;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    for (auto& c : conns) ::shutdown(c->fd.get(), SHUT_RDWR);
    all.swap(conns);
  }
  for (auto& c : all) c->thread.join();
  request_shutdown();  // wait() returns after stop() too
}

void ParameterServer::Impl::request_shutdown() {
  std::lock_guard<std::mutex> lock(exit_mu);
  exit_requested = true;
  exit_cv.notify_all();
}

void ParameterServer::Impl::accept_loop() {
  while (!stopping) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
    // The 1 s bound lets finished connection threads be joined on an idle server too.
    int rc = ::poll(fds, 2, 1000);
    if (stopping) break;
    reap_finished();
    if (rc > 0 && (fds[0].revents & POLLIN)) accept_one();
  }
}

void ParameterServer::Impl::accept_one() {
  int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      CHORUS_LOG(kWarning, "ps") << "accept failed: " << std::strerror(errno);
    }
    return;
  }
  auto conn = std::make_unique<Connection>();
  conn->fd.reset(fd);
  conn->peer = net::peer_name(fd);
  net::set_nodelay(fd);
  net::set_buffer_sizes(fd, 4 << 20);
  std::lock_guard<std::mutex> lock(conns_mu);
  if (conns.size() >= static_cast<size_t>(options.max_clients)) {
    CHORUS_LOG(kWarning, "ps") << "refused " << conn->peer << ": already serving " << conns.size()
                               << " clients (max_clients)";
    return;
  }
  Connection* raw = conn.get();
  try {
    raw->thread = std::thread([this, raw] { serve(*raw); });
  } catch (const std::system_error& e) {  // out of threads: refuse this one, keep serving
    CHORUS_LOG(kWarning, "ps") << "refused " << raw->peer << ": " << e.what();
    return;
  }
  conns.push_back(std::move(conn));
}

void ParameterServer::Impl::reap_finished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    for (auto it = conns.begin(); it != conns.end();) {
      auto next = std::next(it);
      if ((*it)->done) finished.splice(finished.end(), conns, it);
      it = next;
    }
  }
  for (auto& c : finished) c->thread.join();
}

void ParameterServer::Impl::serve(Connection& conn) {
  const int fd = conn.fd.get();
  RequestContext ctx{state, conn, [this] { request_shutdown(); }};
  try {
    rendezvous::authenticate_server(fd, secret, wire::kPurpose,
                                    Deadline::after(options.handshake_timeout));
    wire::Header header;
    std::string meta;
    while (wait_for_request(fd) &&
           wire::receive(fd, Deadline::after(default_timeout()), "ps request", header, meta) &&
           handle_request(ctx, header, meta)) {
    }
  } catch (const Error& e) {  // bad handshake or frame, stalled or vanished client
    if (!stopping) CHORUS_LOG(kWarning, "ps") << "dropped connection from " << conn.peer << ": " << e.what();
  }
  // Tell the peer now; the descriptor is closed when the acceptor reaps this record, so
  // stop() never shutdown()s a number the kernel has reused.
  ::shutdown(fd, SHUT_RDWR);
  conn.done = true;
}

// An authenticated client may stay idle as long as it likes: this wait has no deadline.
bool ParameterServer::Impl::wait_for_request(int fd) {
  pollfd fds[2] = {{fd, POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
  for (;;) {
    int rc = ::poll(fds, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) CHORUS_THROW(IoError, "poll failed: ", std::strerror(errno));
    return !stopping && (fds[0].revents != 0);
  }
}

ParameterServer::ParameterServer(const std::string& host, uint16_t port, Secret secret,
                                 ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(secret), options)) {
  impl_->start(host, port);
}

ParameterServer::~ParameterServer() { impl_->stop(); }

uint16_t ParameterServer::port() const { return net::local_port(impl_->listener.get()); }

void ParameterServer::wait() {
  std::unique_lock<std::mutex> lock(impl_->exit_mu);
  impl_->exit_cv.wait(lock, [this] { return impl_->exit_requested; });
}

void ParameterServer::stop() { impl_->stop(); }

void run_parameter_server(const ClusterSpec& spec, const Secret& secret, ServerOptions options) {
  CHORUS_CHECK_ARG(spec.role == Role::kPs, "run_parameter_server: this task is a ",
                   role_name(spec.role), ", not a ps");
  spec.validate();
  auto [host, port] = split_address(spec.address(), "ps address");
  ParameterServer server(host, port, secret, options);
  CHORUS_LOG(kInfo, "ps") << "ps " << spec.task_index << " serving on " << spec.address();
  server.wait();
  CHORUS_LOG(kInfo, "ps") << "ps " << spec.task_index << " shutting down";
}

}  // namespace chorus::ps
