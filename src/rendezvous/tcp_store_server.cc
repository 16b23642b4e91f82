// TcpStoreServer: one acceptor thread plus one thread per connection (at most
// options.max_clients). A thread per connection keeps every slow, silent or hostile peer
// confined to its own thread: the handshake has its own deadline, a request must arrive
// within CHORUS_TIMEOUT_SECONDS once its first byte has, and blocked get/wait calls sleep on
// StoreState's condition variable. Shutdown: a self-pipe wakes every poll(), StoreState::stop
// wakes every waiter, and shutdown() on each socket interrupts reads and writes in progress.
// The acceptor, the threads and their reaping are rendezvous::ConnectionServer's.
// Lock order: its connection-list lock is never held while taking StoreState's lock.
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

#include "chorus/error.h"
#include "chorus/store.h"
#include "rendezvous/auth.h"
#include "rendezvous/connection_server.h"
#include "rendezvous/frame.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/store_state.h"
#include "util/env.h"
#include "util/log.h"
#include "util/net.h"

namespace chorus {

using rendezvous::Connection;
using rendezvous::ConnectionServer;
using rendezvous::Frame;
using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;
using rendezvous::StoreOp;
using rendezvous::StoreState;

namespace {

// A peer that hung up (or reset) while its request waits in the server.
bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

Deadline wait_deadline(int64_t timeout_ms) {
  int64_t ms = std::clamp<int64_t>(timeout_ms, 0, rendezvous::kMaxWait.count());
  return Deadline::after(std::chrono::milliseconds(ms));
}

}  // namespace

struct TcpStoreServer::Impl {
  Impl(Secret s, TcpStoreServerOptions o)
      : secret(std::move(s)),
        options(o),
        server(server_options(options), [this](Connection& c) { serve(c); }) {}

  static ConnectionServer::Options server_options(const TcpStoreServerOptions& o) {
    ConnectionServer::Options so;
    so.log_tag = "store";
    so.max_clients = o.max_clients;
    return so;
  }

  void start(const std::string& host, uint16_t port);
  void stop();
  void serve(Connection& conn);
  bool handle(Connection& conn, const Frame& request);
  std::string dispatch(Connection& conn, const Frame& request, StoreOp& status);
  std::string set(PayloadReader& in);
  std::string get(Connection& conn, PayloadReader& in, StoreOp& status);
  std::string wait(Connection& conn, PayloadReader& in, StoreOp& status);
  void reject(const Connection& conn, const std::string& why);

  Secret secret;
  TcpStoreServerOptions options;
  StoreState state;
  std::atomic<uint64_t> rejected{0};
  ConnectionServer server;  // its self-pipe is written once at shutdown, never drained
};

void TcpStoreServer::Impl::start(const std::string& host, uint16_t port) {
  CHORUS_CHECK_ARG(!secret.empty(), "TcpStoreServer needs a job secret");
  CHORUS_CHECK_ARG(options.max_clients > 0, "TcpStoreServerOptions.max_clients must be > 0");
  server.start(host, port);
}

void TcpStoreServer::Impl::stop() {
  server.stop([this] { state.stop(); });
}

void TcpStoreServer::Impl::reject(const Connection& conn, const std::string& why) {
  if (server.stopping()) return;  // errors caused by our own shutdown are not the client's fault
  rejected.fetch_add(1);
  CHORUS_LOG(kWarning, "store") << "dropped connection from " << conn.peer << ": " << why;
}

void TcpStoreServer::Impl::serve(Connection& conn) {
  const int fd = conn.fd.get();
  const uint32_t max_frame = static_cast<uint32_t>(std::min<uint64_t>(
      uint64_t{options.max_frame_bytes} + rendezvous::kFrameOverheadBytes, UINT32_MAX));
  try {
    rendezvous::authenticate_server(fd, secret, rendezvous::kStorePurpose,
                                    Deadline::after(options.handshake_timeout));
    Frame request;
    while (server.wait_for_request(fd) &&
           rendezvous::read_frame(fd, max_frame, Deadline::after(default_timeout()),
                                  "store request", request) &&
           handle(conn, request)) {
    }
  } catch (const Error& e) {  // bad handshake, bad frame, malformed payload, stalled sender
    reject(conn, e.what());
  } catch (const std::exception& e) {
    // Anything else (std::bad_alloc, say) must cost this connection, not the whole store:
    // escaping the thread would std::terminate every rank's rendezvous.
    reject(conn, e.what());
  }
  // ConnectionServer now shutdown()s the socket and marks the record done.
}

bool TcpStoreServer::Impl::handle(Connection& conn, const Frame& request) {
  StoreOp status = StoreOp::kOk;
  std::string payload;
  try {
    payload = dispatch(conn, request, status);
  } catch (const InvalidArgument& e) {  // the caller broke a rule; the connection is fine
    status = StoreOp::kError;
    payload = PayloadWriter().str(e.what()).take();
  }
  if (server.stopping()) return false;
  try {
    rendezvous::write_frame(conn.fd.get(), static_cast<uint16_t>(status), payload,
                            Deadline::after(default_timeout()), "store response");
  } catch (const Error& e) {  // the client went away (e.g. after timing out locally)
    CHORUS_LOG(kInfo, "store") << "client " << conn.peer << " left: " << e.what();
    return false;
  }
  return true;
}

std::string TcpStoreServer::Impl::dispatch(Connection& conn, const Frame& request,
                                           StoreOp& status) {
  PayloadReader in(request.payload);
  PayloadWriter out;
  switch (static_cast<StoreOp>(request.type)) {
    case StoreOp::kSet:
      return set(in);
    case StoreOp::kGet:
      return get(conn, in, status);
    case StoreOp::kAdd: {
      std::string key = in.str();
      int64_t delta = in.i64();
      in.finish();
      rendezvous::check_key(key);
      return out.i64(state.add(key, delta)).take();
    }
    case StoreOp::kCheck: {
      auto keys = in.strs();
      in.finish();
      rendezvous::check_keys(keys);
      return out.u8(state.check(keys) ? 1 : 0).take();
    }
    case StoreOp::kRemove: {
      std::string key = in.str();
      in.finish();
      rendezvous::check_key(key);
      return out.u8(state.remove(key) ? 1 : 0).take();
    }
    case StoreOp::kWait:
      return wait(conn, in, status);
    default:
      CHORUS_THROW(IoError, "unknown store request type ", request.type);
  }
}

std::string TcpStoreServer::Impl::set(PayloadReader& in) {
  std::string key = in.str(), value = in.str();
  in.finish();
  rendezvous::check_key(key);
  CHORUS_CHECK_ARG(value.size() <= options.max_frame_bytes, "value for key ",
                   rendezvous::quote_key(key), " is over the server's limit of ",
                   options.max_frame_bytes, " bytes");
  state.set(key, std::move(value));
  return {};
}

std::string TcpStoreServer::Impl::get(Connection& conn, PayloadReader& in, StoreOp& status) {
  std::string key = in.str();
  int64_t timeout_ms = in.i64();
  in.finish();
  rendezvous::check_key(key);
  StoreState::WaitResult result;
  int fd = conn.fd.get();
  auto value = state.get(
      key, wait_deadline(timeout_ms), [fd] { return peer_gone(fd); }, &result);
  if (value) return PayloadWriter().str(*value).take();
  status = StoreOp::kTimeout;
  return PayloadWriter().strs({key}).take();
}

std::string TcpStoreServer::Impl::wait(Connection& conn, PayloadReader& in, StoreOp& status) {
  auto keys = in.strs();
  int64_t timeout_ms = in.i64();
  in.finish();
  rendezvous::check_keys(keys);
  StoreState::WaitResult result;
  int fd = conn.fd.get();
  auto missing = state.wait(
      keys, wait_deadline(timeout_ms), [fd] { return peer_gone(fd); }, &result);
  if (result == StoreState::WaitResult::kReady) return {};
  status = StoreOp::kTimeout;
  return PayloadWriter().strs(missing).take();
}

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, Secret secret,
                               TcpStoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(secret), options)) {
  impl_->start(host, port);
}

TcpStoreServer::~TcpStoreServer() { impl_->stop(); }

uint16_t TcpStoreServer::port() const { return impl_->server.port(); }

uint64_t TcpStoreServer::rejected_connections() const { return impl_->rejected.load(); }

}  // namespace chorus
