// Helpers shared by the coordinator tests: worker threads running serve_coordinator, a
// hand-driven worker that speaks the protocol frame by frame (to die mid-step, stay silent
// or send garbage), a fake coordinator for the worker side, and polling with a deadline.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "../../common/free_port.h"
#include "chorus/error.h"
#include "chorus/ps/coordinator.h"
#include "ps/coordinator/protocol.h"
#include "rendezvous/auth.h"
#include "util/net.h"

namespace chorus::ps::testing {

using std::chrono::milliseconds;
namespace proto = ::chorus::ps::coordinator;

inline Secret test_secret() { return Secret("coordinator-test-secret"); }

inline std::string address_of(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

using ::chorus::test::free_port;  // ../../common/free_port.h

// Polls `pred` every few milliseconds; false if it is still false after `timeout`.
inline bool eventually(const std::function<bool()>& pred,
                       milliseconds timeout = milliseconds(20000)) {
  Deadline deadline = Deadline::after(timeout);
  while (!pred()) {
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// serve_coordinator on a thread of its own; remembers how it ended.
class WorkerThread {
 public:
  WorkerThread(uint16_t port, int index, StepHandler handler, Secret secret = test_secret(),
               milliseconds connect_timeout = milliseconds(20000)) {
    thread_ = std::thread([=] {
      try {
        serve_coordinator(address_of(port), index, secret, handler, connect_timeout);
      } catch (...) {
        error_ = std::current_exception();
      }
    });
  }
  ~WorkerThread() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  // After join(): the exception serve_coordinator threw, or null when it returned.
  std::exception_ptr error() const { return error_; }
  std::string error_text() const {
    try {
      if (error_) std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

 private:
  std::exception_ptr error_;
  std::thread thread_;
};

// Shuts the coordinator's workers down when it goes out of scope. Declared after the
// WorkerThreads of a test, it runs before their destructors join them.
class ShutdownOnExit {
 public:
  explicit ShutdownOnExit(Coordinator& coordinator) : coordinator_(coordinator) {}
  ~ShutdownOnExit() { coordinator_.shutdown_workers(); }

 private:
  Coordinator& coordinator_;
};

// A worker driven by hand, frame by frame.
class RawWorker {
 public:
  explicit RawWorker(uint16_t port, const Secret& secret = test_secret())
      : fd_(net::connect_tcp({"127.0.0.1", port}, deadline())) {
    rendezvous::authenticate_client(fd_.get(), secret, proto::kPurpose, deadline());
  }
  // Says hello and returns the coordinator's answer (welcome, reject or shutdown).
  rendezvous::Frame hello(int index) {
    send(proto::Msg::kHello, proto::encode_hello(static_cast<uint32_t>(index)));
    return read();
  }
  void send(proto::Msg type, const std::string& payload) {
    proto::send(fd_.get(), type, payload, deadline(), "test worker");
  }
  rendezvous::Frame read() {
    rendezvous::Frame frame;
    if (!proto::receive(fd_.get(), deadline(), "test worker", frame)) {
      CHORUS_THROW(IoError, "test worker: connection closed");
    }
    return frame;
  }
  // Reads until a step arrives, answering pings (or not, when `silent`).
  proto::StepMsg next_step(bool answer_pings = true) {
    for (;;) {
      rendezvous::Frame frame = read();
      if (frame.type == static_cast<uint16_t>(proto::Msg::kStep)) return proto::parse_step(frame);
      if (answer_pings && frame.type == static_cast<uint16_t>(proto::Msg::kPing)) {
        send(proto::Msg::kPong, {});
      }
    }
  }
  // True when the coordinator closes the connection within the deadline (frames before
  // the close are skipped).
  bool closed_by_peer() {
    try {
      for (;;) read();
    } catch (const IoError&) {
      return true;
    } catch (const TimeoutError&) {
      return false;
    }
  }
  void close() { fd_.reset(); }
  int fd() const { return fd_.get(); }

 private:
  static Deadline deadline() { return Deadline::after(milliseconds(20000)); }
  net::Fd fd_;
};

// Plays the coordinator for one worker: accepts, authenticates, welcomes it.
class FakeCoordinator {
 public:
  FakeCoordinator() : listener_(net::listen_tcp("127.0.0.1", 0)) {}
  uint16_t port() const { return net::local_port(listener_.get()); }
  void accept_and_welcome(milliseconds heartbeat) {
    Deadline deadline = Deadline::after(milliseconds(20000));
    conn_ = net::accept_tcp(listener_.get(), deadline);
    rendezvous::authenticate_server(conn_.get(), test_secret(), proto::kPurpose, deadline);
    rendezvous::Frame hello;
    ASSERT_TRUE(proto::receive(conn_.get(), deadline, "fake coordinator", hello));
    proto::parse_hello(hello);
    proto::send(conn_.get(), proto::Msg::kWelcome, proto::encode_welcome(heartbeat), deadline,
                "fake coordinator");
  }
  void send(proto::Msg type, const std::string& payload) {
    proto::send(conn_.get(), type, payload, Deadline::after(milliseconds(20000)),
                "fake coordinator");
  }
  // True when the worker closes (or resets) the connection within `timeout`; frames it
  // sends first are skipped.
  bool closed_by_worker(milliseconds timeout) {
    Deadline deadline = Deadline::after(timeout);
    try {
      rendezvous::Frame frame;
      while (proto::receive(conn_.get(), deadline, "fake coordinator", frame)) {
      }
      return true;
    } catch (const IoError&) {
      return true;
    } catch (const TimeoutError&) {
      return false;
    }
  }
  void close() { conn_.reset(); }

 private:
  net::Fd listener_;
  net::Fd conn_;
};

// Text of the exception a RemoteValue throws (and whether it was of type E).
template <typename E>
bool throws_as(const RemoteValue& value, std::string* text = nullptr) {
  try {
    value.get();
  } catch (const E& e) {
    if (text) *text = e.what();
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

}  // namespace chorus::ps::testing
