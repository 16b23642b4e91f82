// ParameterServer: one acceptor thread plus one thread per authenticated connection (at
// most options.max_clients), the shape of TcpStoreServer: a slow or hostile peer is
// confined to its own thread, the handshake has its own deadline, and a request must
// arrive whole within CHORUS_TIMEOUT_SECONDS once its first byte has.
// Shutdown: a self-pipe wakes every poll(), PsState::stop wakes waiting pulls, and
// shutdown() on each socket interrupts transfers in progress.
// The acceptor, the threads and their reaping are rendezvous::ConnectionServer's.
// Lock order: its connection-list lock is never held while taking PsState's locks.
#include "chorus/ps/server.h"

#include <condition_variable>
#include <exception>
#include <memory>

#include "chorus/error.h"
#include "rendezvous/auth.h"
#include "server_requests.h"
#include "util/env.h"
#include "util/log.h"

namespace chorus::ps {

struct ParameterServer::Impl {
  Impl(Secret s, ServerOptions o)
      : secret(std::move(s)),
        options(o),
        server(server_options(options),
               [this](rendezvous::Connection& c) { serve(static_cast<Connection&>(c)); }) {}

  static rendezvous::ConnectionServer::Options server_options(const ServerOptions& o) {
    rendezvous::ConnectionServer::Options so;
    so.log_tag = "ps";
    so.max_clients = o.max_clients;
    so.buffer_bytes = 4 << 20;
    so.make_connection = [] { return std::make_unique<Connection>(); };
    return so;
  }

  void start(const std::string& host, uint16_t port);
  void stop();
  void serve(Connection& conn);
  void request_shutdown();

  Secret secret;
  ServerOptions options;
  PsState state;
  std::mutex stop_mu;  // serialises stop()
  std::mutex exit_mu;
  std::condition_variable exit_cv;
  bool exit_requested = false;          // guarded by exit_mu
  rendezvous::ConnectionServer server;  // its self-pipe is written once at stop, never drained
};

void ParameterServer::Impl::start(const std::string& host, uint16_t port) {
  CHORUS_CHECK_ARG(!secret.empty(), "ParameterServer needs a job secret");
  CHORUS_CHECK_ARG(options.max_clients > 0, "ServerOptions.max_clients must be > 0");
  server.start(host, port);
}

void ParameterServer::Impl::stop() {
  std::lock_guard<std::mutex> once(stop_mu);
  server.stop([this] { state.stop(); });
  request_shutdown();  // wait() returns after stop() too
}

void ParameterServer::Impl::request_shutdown() {
  std::lock_guard<std::mutex> lock(exit_mu);
  exit_requested = true;
  exit_cv.notify_all();
}

void ParameterServer::Impl::serve(Connection& conn) {
  const int fd = conn.fd.get();
  RequestContext ctx{state, conn, [this] { request_shutdown(); }};
  try {
    rendezvous::authenticate_server(fd, secret, wire::kPurpose,
                                    Deadline::after(options.handshake_timeout));
    wire::Header header;
    std::string meta;
    while (server.wait_for_request(fd) &&
           wire::receive(fd, Deadline::after(default_timeout()), "ps request", header, meta) &&
           handle_request(ctx, header, meta)) {
    }
  } catch (const std::exception& e) {
    // A bad handshake or frame, a stalled or vanished client, or a request that this ps
    // cannot hold (std::bad_alloc): only this connection ends. Any exception that left
    // this thread would terminate the ps and every other client's connection with it.
    if (!server.stopping()) {
      CHORUS_LOG(kWarning, "ps") << "dropped connection from " << conn.peer << ": " << e.what();
    }
  }
  // ConnectionServer now shutdown()s the socket and marks the record done.
}

ParameterServer::ParameterServer(const std::string& host, uint16_t port, Secret secret,
                                 ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(secret), options)) {
  impl_->start(host, port);
}

ParameterServer::~ParameterServer() { impl_->stop(); }

uint16_t ParameterServer::port() const { return impl_->server.port(); }

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
