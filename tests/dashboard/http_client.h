// A tiny blocking HTTP client for the dashboard tests: one request, the whole answer.
#pragma once

#include <sys/socket.h>

#include <cstdlib>
#include <string>

#include "util/net.h"

namespace chorus::web::testing {

struct Reply {
  int status = 0;  // 0: no status line (the server closed without answering)
  std::string head;
  std::string body;
};

// Sends `raw` bytes to 127.0.0.1:port (then shuts its sending side, unless `half_close` is
// false) and reads until the server closes (`timeout_ms` at most).
inline Reply raw_request(uint16_t port, const std::string& raw, bool half_close = true,
                         int timeout_ms = 5000) {
  net::Fd fd =
      net::connect_tcp({"127.0.0.1", port}, Deadline::after(std::chrono::milliseconds(timeout_ms)));
  Deadline deadline = Deadline::after(std::chrono::milliseconds(timeout_ms));
  if (!raw.empty()) net::send_all(fd.get(), raw.data(), raw.size(), deadline, "test request");
  // Nothing more will come: the server sees the end at once instead of waiting for more.
  if (half_close) ::shutdown(fd.get(), SHUT_WR);
  std::string all;
  char buf[8192];
  try {
    while (size_t n = net::recv_some(fd.get(), buf, sizeof(buf), deadline, "test reply")) {
      all.append(buf, n);
    }
  } catch (const std::exception&) {  // reset by the server: what was read counts
  }
  Reply r;
  size_t end = all.find("\r\n\r\n");
  r.head = all.substr(0, end);
  if (end != std::string::npos) r.body = all.substr(end + 4);
  if (all.rfind("HTTP/1.1 ", 0) == 0) r.status = std::atoi(all.c_str() + 9);
  return r;
}

inline Reply get(uint16_t port, const std::string& target) {
  return raw_request(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
}

}  // namespace chorus::web::testing
