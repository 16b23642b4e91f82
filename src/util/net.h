// TCP socket helpers shared by the store and the TCP transport. Every socket made here is
// non-blocking with close-on-exec; blocking-style helpers wait with poll() up to a Deadline.
// Errors: IoError (refused, reset, closed), TimeoutError (deadline passed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/deadline.h"

namespace chorus::net {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "host:port", "[ipv6]:port". Host may be a name or a numeric address.
struct Endpoint {
  std::string host;
  uint16_t port = 0;

  std::string to_string() const;
  // Throws InvalidArgument on a malformed string or a port outside 1..65535.
  static Endpoint parse(const std::string& text);
};

// Listens on host:port (port 0 picks a free one). host "" or "0.0.0.0" binds all IPv4.
Fd listen_tcp(const std::string& host, uint16_t port, int backlog = 512);
// The local port / numeric address a socket is bound to.
uint16_t local_port(int fd);
std::string local_address(int fd);
// The numeric address of the connected peer, "addr:port" (for log messages).
std::string peer_name(int fd);

// Connects, retrying refused attempts until the deadline (the listener may not be up yet).
// The result has TCP_NODELAY set.
Fd connect_tcp(const Endpoint& to, Deadline deadline);
// Accepts one connection; TimeoutError when none arrives in time.
Fd accept_tcp(int listen_fd, Deadline deadline);

void set_nonblocking(int fd);
void set_nodelay(int fd);
// Bigger kernel buffers help large transfers on loopback and fast links.
void set_buffer_sizes(int fd, int bytes);

// Sends/receives exactly n bytes. `what` names the operation in error messages.
void send_all(int fd, const void* data, size_t n, Deadline deadline, const char* what);
void recv_all(int fd, void* data, size_t n, Deadline deadline, const char* what);

// Receives what has arrived, 1..n bytes, waiting for the first; 0 means the peer closed
// before sending anything (a clean end between messages). TimeoutError past `deadline`.
size_t recv_some(int fd, void* data, size_t n, Deadline deadline, const char* what);

// Waits until fd is readable (events=POLLIN) or writable (POLLOUT). Returns false on timeout.
bool wait_fd(int fd, short events, Deadline deadline);

}  // namespace chorus::net
