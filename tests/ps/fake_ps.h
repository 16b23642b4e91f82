// Raw ps messages for hostile-peer tests: a header encoder whose every field may lie, and
// FakePs, a stand-in parameter server that answers each request with whatever bytes the
// test gives it, so the client can be shown replies that no real ps would send.
#pragma once

#include <poll.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "ps/wire.h"
#include "ps_test_util.h"
#include "rendezvous/auth.h"
#include "util/net.h"

namespace chorus::ps::testing {

// A message header as wire::send writes it, from the fields given.
inline std::string header(uint16_t type, uint32_t meta, uint64_t bulk,
                          uint32_t magic = wire::kMagic) {
  std::string h(wire::kHeaderBytes, '\0');
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) h[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(0, magic, 4);
  put(4, wire::kVersion, 2);
  put(6, type, 2);
  put(8, meta, 4);
  put(12, bulk, 8);
  return h;
}

// A whole message whose header matches its meta and bulk.
inline std::string message(wire::Type type, const std::string& meta, const std::string& bulk = {}) {
  return header(static_cast<uint16_t>(type), static_cast<uint32_t>(meta.size()), bulk.size()) +
         meta + bulk;
}

// Accepts connections one after another on loopback, authenticates each (test_secret()),
// reads every request whole and sends back what `answer` returns.
class FakePs {
 public:
  struct Reply {
    std::string bytes;     // sent as they are
    bool hang_up = false;  // close the connection after sending them
  };
  // Called for each request once its bulk has been read (and dropped).
  using Answer = std::function<Reply(wire::Type type, const std::string& meta)>;

  explicit FakePs(Answer answer)
      : listener_(net::listen_tcp("127.0.0.1", 0)), answer_(std::move(answer)) {
    thread_ = std::thread([this] { run(); });
  }
  ~FakePs() {
    stop_ = true;
    thread_.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(net::local_port(listener_.get()));
  }
  int connections() const { return connections_; }

 private:
  static Deadline soon() { return Deadline::after(milliseconds(20000)); }

  // Waits until `fd` is readable; false once the test is over.
  bool readable(int fd) const {
    while (!net::wait_fd(fd, POLLIN, Deadline::after(milliseconds(20)))) {
      if (stop_) return false;
    }
    return true;
  }

  void run() {
    while (readable(listener_.get())) {
      try {
        net::Fd fd = net::accept_tcp(listener_.get(), soon());
        ++connections_;
        rendezvous::authenticate_server(fd.get(), test_secret(), wire::kPurpose, soon());
        serve(fd.get());
      } catch (const Error&) {  // the client broke or left: wait for its next connection
      }
    }
  }

  void serve(int fd) {
    wire::Header h;
    std::string meta;
    while (readable(fd) && wire::receive(fd, soon(), "fake ps", h, meta)) {
      std::string bulk(static_cast<size_t>(h.bulk_bytes), '\0');  // tests send little
      wire::recv_bulk(fd, {{bulk.data(), bulk.size()}}, soon(), "fake ps");
      Reply reply = answer_(h.type, meta);
      net::send_all(fd, reply.bytes.data(), reply.bytes.size(), soon(), "fake ps");
      if (reply.hang_up) return;
    }
  }

  net::Fd listener_;
  Answer answer_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace chorus::ps::testing
