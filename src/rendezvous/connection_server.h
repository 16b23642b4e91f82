// ConnectionServer: the accept / thread-per-connection / reap / stop machinery shared by
// TcpStoreServer, ParameterServer and the Coordinator (internal; not installed).
//
// One acceptor thread polls the listening socket and a self-pipe; the poll is bounded
// (1 s unless Options::poll_timeout_ms says otherwise) so finished connection threads are
// joined on an idle server too. Each accepted socket gets a Connection record and a thread
// of its own that runs the owner's handler; a slow, silent or hostile peer is thereby
// confined to its own thread. Past Options::max_clients live records, a new socket is
// refused with a warning (as it is when no thread can be started).
//
// A handler should catch its own errors; one that throws anyway (any exception) has it
// logged as a dropped connection, and the server keeps serving (never std::terminate). An
// exception in accept or on_accept likewise refuses that one socket.
//
// Descriptor rule: when the handler returns, the connection's thread shutdown()s the socket
// (the peer learns now) and sets `done`; the descriptor itself is closed only when the
// acceptor (or stop()) reaps the record, so stop() can never shutdown() a number the kernel
// has reused.
//
// Thread-safety: start() and stop() are called by the owner (stop() may be called from any
// thread but a connection thread, more than once and concurrently: calls are serialised).
// stopping(), wake_fd(), port() and any_connection() are safe from any thread once start()
// has returned. Hooks run on the acceptor thread (poll_timeout_ms, make_connection,
// on_accept) or on the connection's own thread (handler, on_closed), never under the lock
// of the connection list, so they may take the owner's locks.
//
// Shutdown order in stop(): set stopping(); write the self-pipe once (it is never drained,
// so every poll() on wake_fd() returns from then on); run the owner's `after_wake` step
// (e.g. wake its own condition variables); join the acceptor, after which no connection is
// added; shutdown() every live socket; join every connection thread; close the records.
// The owner must call stop() before destroying anything its handler uses; the destructor
// calls stop() too, as a backstop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "util/net.h"

namespace chorus::rendezvous {

// One accepted socket. Owners that need more per-connection state derive from it and
// supply Options::make_connection; the handler then static_casts to the derived type.
struct Connection {
  virtual ~Connection() = default;

  net::Fd fd;                     // closed only when the record is reaped
  std::string peer;               // "host:port" of the peer, for log lines
  std::thread thread;             // runs the handler; joined by the acceptor or stop()
  std::atomic<bool> done{false};  // the thread has finished; the acceptor may reap it
};

class ConnectionServer {
 public:
  using Handler = std::function<void(Connection&)>;

  struct Options {
    const char* log_tag = "server";  // CHORUS_LOG tag for accept errors and refusals
    int max_clients = 0;             // live connections at most; 0: no limit
    int buffer_bytes = 0;            // > 0: net::set_buffer_sizes on each accepted socket
    // Acceptor thread, before each poll: how long it may sleep (ms). Default: 1000.
    std::function<int()> poll_timeout_ms;
    // Acceptor thread: a fresh record (a derived type). Default: a plain Connection.
    std::function<std::unique_ptr<Connection>()> make_connection;
    // Acceptor thread, once fd and peer are set and before max_clients is checked:
    // false refuses the socket (the hook logs why).
    std::function<bool(Connection&)> on_accept;
    // Connection thread, after the handler returned and the socket was shut down, just
    // before `done` is set.
    std::function<void(Connection&)> on_closed;
  };

  ConnectionServer(Options options, Handler handler);
  ~ConnectionServer();
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  // Listens on host:port and starts the acceptor. Throws IoError / InvalidArgument.
  void start(const std::string& host, uint16_t port);
  // See "Shutdown order" above. `after_wake` runs after the self-pipe is written and
  // before any thread is joined.
  void stop(const std::function<void()>& after_wake = {});

  bool stopping() const { return stopping_.load(); }
  // Readable from the moment stop() begins; handlers add it to their poll() sets.
  int wake_fd() const { return wake_read_.get(); }
  uint16_t port() const;
  // For handlers: waits until `fd` is readable (a request, or EOF) or stop() begins; true
  // for the former. An authenticated client may stay idle as long as it likes, so this
  // wait has no deadline of its own. Throws IoError when poll() fails.
  bool wait_for_request(int fd) const;
  // True when `pred` holds for some live (not yet reaped) record; holds the list lock,
  // so `pred` must not block or take other locks.
  bool any_connection(const std::function<bool(const Connection&)>& pred);

 private:
  void accept_loop();
  void accept_one();
  void reap_finished();
  void run(Connection& conn);

  const Options options_;
  const Handler handler_;
  net::Fd listener_;
  net::Fd wake_read_, wake_write_;  // self-pipe: written once at stop, never drained
  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;  // serialises stop()
  std::mutex conns_mu_;
  std::list<std::unique_ptr<Connection>> conns_;  // guarded by conns_mu_
  std::thread acceptor_;
};

}  // namespace chorus::rendezvous
