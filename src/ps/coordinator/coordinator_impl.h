// Coordinator::Impl: one acceptor thread plus one thread per worker connection, as in
// TcpStoreServer. A connection's thread does everything for that worker: handshake,
// registration, sending steps, pings and the shutdown frame, reading replies. Threads that
// change what a worker may do (schedule, a reply, a worker leaving, shutdown) wake the
// other connection threads through each one's eventfd; they then ask the Scheduler.
//
// The acceptor, the threads and their reaping are rendezvous::ConnectionServer's.
// Locks: `mu` guards the Scheduler, `owners` and `shutting_down`; the ConnectionServer's
// lock guards the list of connection records. Never hold both. RemoteValue states are filled under
// `mu` (their own lock comes second).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "chorus/ps/coordinator.h"
#include "ps/coordinator/scheduler.h"
#include "rendezvous/connection_server.h"
#include "util/net.h"

namespace chorus::ps {

namespace coordinator {

// fd, peer, thread and done (the thread has finished; the acceptor may reap it) come
// from the ConnectionServer that runs the connection.
struct Conn : rendezvous::Connection {
  net::Fd wake;                       // eventfd: "the scheduler changed, look again"
  int index = -1;                     // guarded by Impl::mu; set once registered
  bool bye_sent = false;              // own thread only
  std::atomic<bool> enrolled{false};  // registered and not yet gone (for the destructor)
};

}  // namespace coordinator

struct Coordinator::Impl {
  using Conn = coordinator::Conn;

  Impl(Secret secret, CoordinatorOptions options);

  // coordinator.cc: lifecycle, acceptor and the public calls.
  void start(const std::string& host, uint16_t port);
  void stop();
  rendezvous::ConnectionServer::Options server_options();
  bool prepare(Conn& c);          // acceptor thread: the eventfd; false refuses the socket
  int check_no_worker_timeout();  // returns how long the acceptor may sleep (ms)
  void wait_for_goodbyes();
  void request_shutdown();
  void wake_workers();  // REQUIRES: mu held

  // connection.cc: one worker connection.
  void serve(Conn& c);
  int read_hello(Conn& c);
  std::string claim(Conn& c, int index);
  bool enroll(Conn& c, int index);
  void session(Conn& c);
  void act(Conn& c);
  void handle(Conn& c, const rendezvous::Frame& frame);
  bool owns(const Conn& c) const;  // REQUIRES: mu held
  void retire(Conn& c);
  bool wait_readable(Conn& c, int timeout_ms);

  const Secret secret;
  const CoordinatorOptions options;
  const std::chrono::milliseconds heartbeat_timeout;
  const std::chrono::milliseconds ping_interval;
  const std::chrono::milliseconds no_worker_timeout;

  mutable std::mutex mu;
  std::condition_variable cv;        // a step ended, a worker came or went
  coordinator::Scheduler scheduler;  // guarded by mu
  std::map<int, Conn*> owners;       // guarded by mu: the live connection of each worker
  bool shutting_down = false;        // guarded by mu
  int64_t next_step_id = 0;          // guarded by mu

  // Its self-pipe (wake_fd()) is written once by stop(), never drained.
  rendezvous::ConnectionServer server;
};

}  // namespace chorus::ps
