// ConnectionServer: see connection_server.h for the contract.
// Lock order: conns_mu_ is never held while running an owner's hook or handler (only
// any_connection's predicate), so owners may take their own locks in them.
#include "rendezvous/connection_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <system_error>
#include <utility>

#include "chorus/error.h"
#include "util/log.h"

namespace chorus::rendezvous {

ConnectionServer::ConnectionServer(Options options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

ConnectionServer::~ConnectionServer() { stop(); }

void ConnectionServer::start(const std::string& host, uint16_t port) {
  listener_ = net::listen_tcp(host, port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    CHORUS_THROW(IoError, "pipe2 failed: ", std::strerror(errno));
  }
  wake_read_.reset(pipe_fds[0]);
  wake_write_.reset(pipe_fds[1]);
  acceptor_ = std::thread([this] { accept_loop(); });
}

void ConnectionServer::stop(const std::function<void()>& after_wake) {
  std::lock_guard<std::mutex> once(stop_mu_);
  if (!stopping_.exchange(true) && wake_write_.valid()) {
    char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_write_.get(), &byte, 1);
  }
  if (after_wake) after_wake();
  if (acceptor_.joinable()) acceptor_.join();  // no connection is added after this
  std::list<std::unique_ptr<Connection>> all;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    for (auto& c : conns_) ::shutdown(c->fd.get(), SHUT_RDWR);
    all.swap(conns_);
  }
  for (auto& c : all) c->thread.join();
}

uint16_t ConnectionServer::port() const { return net::local_port(listener_.get()); }

// An authenticated client may stay idle as long as it likes, so this wait has no deadline
// of its own: it ends when a request (or EOF) arrives or the server shuts down.
bool ConnectionServer::wait_for_request(int fd) const {
  pollfd fds[2] = {{fd, POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
  for (;;) {
    int rc = ::poll(fds, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) CHORUS_THROW(IoError, "poll failed: ", std::strerror(errno));
    return !stopping_ && (fds[0].revents != 0);
  }
}

bool ConnectionServer::any_connection(const std::function<bool(const Connection&)>& pred) {
  std::lock_guard<std::mutex> lock(conns_mu_);
  for (auto& c : conns_) {
    if (pred(*c)) return true;
  }
  return false;
}

void ConnectionServer::accept_loop() {
  while (!stopping_) {
    // The 1 s bound lets finished connection threads be joined on an idle server too.
    int timeout_ms = options_.poll_timeout_ms ? options_.poll_timeout_ms() : 1000;
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    int rc = ::poll(fds, 2, timeout_ms);
    if (stopping_) break;
    reap_finished();
    if (rc > 0 && (fds[0].revents & POLLIN)) {
      try {
        accept_one();
      } catch (const std::exception& e) {  // e.g. std::bad_alloc: refuse one, keep accepting
        CHORUS_LOG(kWarning, options_.log_tag) << "accept failed: " << e.what();
      }
    }
  }
}

void ConnectionServer::accept_one() {
  const char* tag = options_.log_tag;
  int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      CHORUS_LOG(kWarning, tag) << "accept failed: " << std::strerror(errno);
    }
    return;
  }
  auto conn =
      options_.make_connection ? options_.make_connection() : std::make_unique<Connection>();
  conn->fd.reset(fd);
  conn->peer = net::peer_name(fd);
  net::set_nodelay(fd);
  if (options_.buffer_bytes > 0) net::set_buffer_sizes(fd, options_.buffer_bytes);
  if (options_.on_accept && !options_.on_accept(*conn)) return;
  std::lock_guard<std::mutex> lock(conns_mu_);
  if (options_.max_clients > 0 && conns_.size() >= static_cast<size_t>(options_.max_clients)) {
    CHORUS_LOG(kWarning, tag) << "refused " << conn->peer << ": already serving " << conns_.size()
                              << " clients (max_clients)";
    return;
  }
  // Listed before its thread starts, so that no failure here (push_back's std::bad_alloc)
  // can free a record that a running thread uses.
  conns_.push_back(std::move(conn));
  Connection* raw = conns_.back().get();
  try {
    raw->thread = std::thread([this, raw] { run(*raw); });
  } catch (const std::system_error& e) {  // out of threads: refuse this one, keep serving
    CHORUS_LOG(kWarning, tag) << "refused " << raw->peer << ": " << e.what();
    conns_.pop_back();
  }
}

void ConnectionServer::reap_finished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      auto next = std::next(it);
      if ((*it)->done) finished.splice(finished.end(), conns_, it);
      it = next;
    }
  }
  for (auto& c : finished) c->thread.join();
}

void ConnectionServer::run(Connection& conn) {
  // Owners catch their own errors; this is the backstop. An exception that left this thread
  // would std::terminate the whole server (the store, and with it the job) for one peer.
  try {
    handler_(conn);
  } catch (const std::exception& e) {
    if (!stopping_) {
      CHORUS_LOG(kWarning, options_.log_tag)
          << "dropped connection from " << conn.peer << ": " << e.what();
    }
  } catch (...) {
    if (!stopping_) {
      CHORUS_LOG(kWarning, options_.log_tag)
          << "dropped connection from " << conn.peer << ": unknown exception";
    }
  }
  // Tell the peer now; the descriptor itself is closed when the acceptor reaps this
  // record, so stop() can never shutdown() a number the kernel has reused.
  ::shutdown(conn.fd.get(), SHUT_RDWR);
  if (options_.on_closed) options_.on_closed(conn);
  conn.done = true;
}

}  // namespace chorus::rendezvous
