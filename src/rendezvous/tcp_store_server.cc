// TcpStoreServer: one acceptor thread plus one thread per connection (at most
// options.max_clients). A thread per connection keeps every slow, silent or hostile peer
// confined to its own thread: the handshake has its own deadline, a request must arrive
// within CHORUS_TIMEOUT_SECONDS once its first byte has, and blocked get/wait calls sleep on
// StoreState's condition variable. Shutdown: a self-pipe wakes every poll(), StoreState::stop
// wakes every waiter, and shutdown() on each socket interrupts reads and writes in progress.
// Lock order: conns_mu_ is never held while taking StoreState's lock.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <memory>
#include <system_error>
#include <thread>

#include "chorus/error.h"
#include "chorus/store.h"
#include "rendezvous/auth.h"
#include "rendezvous/frame.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/store_state.h"
#include "util/env.h"
#include "util/log.h"
#include "util/net.h"

namespace chorus {

using rendezvous::Frame;
using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;
using rendezvous::StoreOp;
using rendezvous::StoreState;

namespace {

struct Connection {
  net::Fd fd;
  std::string peer;
  std::thread thread;
  std::atomic<bool> done{false};
};

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
  Impl(Secret s, TcpStoreServerOptions o) : secret(std::move(s)), options(o) {}

  void start(const std::string& host, uint16_t port);
  void stop();
  void accept_loop();
  void accept_one();
  void reap_finished();
  void serve(Connection& conn);
  bool wait_for_request(int fd);
  bool handle(Connection& conn, const Frame& request);
  std::string dispatch(Connection& conn, const Frame& request, StoreOp& status);
  std::string set(PayloadReader& in);
  std::string get(Connection& conn, PayloadReader& in, StoreOp& status);
  std::string wait(Connection& conn, PayloadReader& in, StoreOp& status);
  void reject(const Connection& conn, const std::string& why);

  Secret secret;
  TcpStoreServerOptions options;
  net::Fd listener;
  net::Fd wake_read, wake_write;  // self-pipe: written once at shutdown, never drained
  StoreState state;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> rejected{0};
  std::mutex conns_mu;
  std::list<std::unique_ptr<Connection>> conns;  // guarded by conns_mu
  std::thread acceptor;
};

void TcpStoreServer::Impl::start(const std::string& host, uint16_t port) {
  CHORUS_CHECK_ARG(!secret.empty(), "TcpStoreServer needs a job secret");
  CHORUS_CHECK_ARG(options.max_clients > 0, "TcpStoreServerOptions.max_clients must be > 0");
  listener = net::listen_tcp(host, port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    CHORUS_THROW(IoError, "pipe2 failed: ", std::strerror(errno));
  }
  wake_read.reset(pipe_fds[0]);
  wake_write.reset(pipe_fds[1]);
  acceptor = std::thread([this] { accept_loop(); });
}

void TcpStoreServer::Impl::stop() {
  stopping = true;
  char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_write.get(), &byte, 1);
  state.stop();
  if (acceptor.joinable()) acceptor.join();  // no connection is added after this
  std::list<std::unique_ptr<Connection>> all;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    for (auto& c : conns) ::shutdown(c->fd.get(), SHUT_RDWR);
    all.swap(conns);
  }
  for (auto& c : all) c->thread.join();
}

void TcpStoreServer::Impl::accept_loop() {
  while (!stopping) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
    // The 1 s bound lets finished connection threads be joined on an idle server too.
    int rc = ::poll(fds, 2, 1000);
    if (stopping) break;
    reap_finished();
    if (rc > 0 && (fds[0].revents & POLLIN)) accept_one();
  }
}

void TcpStoreServer::Impl::accept_one() {
  int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      CHORUS_LOG(kWarning, "store") << "accept failed: " << std::strerror(errno);
    }
    return;
  }
  auto conn = std::make_unique<Connection>();
  conn->fd.reset(fd);
  conn->peer = net::peer_name(fd);
  net::set_nodelay(fd);
  std::lock_guard<std::mutex> lock(conns_mu);
  if (conns.size() >= static_cast<size_t>(options.max_clients)) {
    CHORUS_LOG(kWarning, "store") << "refused " << conn->peer << ": already serving "
                                  << conns.size() << " clients (max_clients)";
    return;
  }
  Connection* raw = conn.get();
  try {
    raw->thread = std::thread([this, raw] { serve(*raw); });
  } catch (const std::system_error& e) {  // out of threads: refuse this one, keep serving
    CHORUS_LOG(kWarning, "store") << "refused " << raw->peer << ": " << e.what();
    return;
  }
  conns.push_back(std::move(conn));
}

void TcpStoreServer::Impl::reap_finished() {
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

void TcpStoreServer::Impl::reject(const Connection& conn, const std::string& why) {
  if (stopping) return;  // errors caused by our own shutdown are not the client's fault
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
    while (wait_for_request(fd) &&
           rendezvous::read_frame(fd, max_frame, Deadline::after(default_timeout()),
                                  "store request", request) &&
           handle(conn, request)) {
    }
  } catch (const Error& e) {  // bad handshake, bad frame, malformed payload, stalled sender
    reject(conn, e.what());
  }
  // Tell the peer now; the descriptor itself is closed when the acceptor reaps this
  // record, so stop() can never shutdown() a number the kernel has reused.
  ::shutdown(fd, SHUT_RDWR);
  conn.done = true;
}

// An authenticated client may stay idle as long as it likes, so this wait has no deadline
// of its own: it ends when a request (or EOF) arrives or the server shuts down.
bool TcpStoreServer::Impl::wait_for_request(int fd) {
  pollfd fds[2] = {{fd, POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
  for (;;) {
    int rc = ::poll(fds, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) CHORUS_THROW(IoError, "poll failed: ", std::strerror(errno));
    return !stopping && (fds[0].revents != 0);
  }
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
  if (stopping) return false;
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

uint16_t TcpStoreServer::port() const { return net::local_port(impl_->listener.get()); }

uint64_t TcpStoreServer::rejected_connections() const { return impl_->rejected.load(); }

}  // namespace chorus
