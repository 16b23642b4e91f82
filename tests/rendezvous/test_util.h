// Helpers shared by the rendezvous tests: temporary directories, polling for a condition
// with a deadline, and raw sockets that play a hostile or broken client.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "util/deadline.h"
#include "util/net.h"

#include "../common/temp_dir.h"

namespace chorus::testing {

using std::chrono::milliseconds;

// Polls `pred` every few milliseconds; false if it is still false after `timeout`.
inline bool eventually(const std::function<bool()>& pred,
                       milliseconds timeout = milliseconds(5000)) {
  Deadline deadline = Deadline::after(timeout);
  while (!pred()) {
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

inline net::Fd raw_connect(uint16_t port) {
  return net::connect_tcp({"127.0.0.1", port}, Deadline::after(milliseconds(5000)));
}

inline void send_bytes(int fd, const std::string& bytes) {
  net::send_all(fd, bytes.data(), bytes.size(), Deadline::after(milliseconds(5000)), "test");
}

// True when the peer closes (EOF or reset) within `timeout`; whatever it sends first (a
// REJECT message, say) is read and ignored.
inline bool closed_by_peer(int fd, milliseconds timeout = milliseconds(5000)) {
  Deadline deadline = Deadline::after(timeout);
  char buf[256];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return true;
    }
    if (n > 0) continue;
    if (!net::wait_fd(fd, POLLIN, deadline)) return false;
  }
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace chorus::testing
