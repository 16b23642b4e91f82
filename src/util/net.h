// TCP socket helpers shared by the store and the TCP transport. Every socket made here is
// non-blocking with close-on-exec; blocking-style helpers wait with poll() up to a Deadline.
// Errors: IoError (refused, reset, closed), TimeoutError (deadline passed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// Settings given to a socket before it listens or connects, so that they hold from the first
// segment (accepted sockets inherit a listener's). Both ends of a connection should agree.
struct SocketTuning {
  int buffer_bytes = 0;  // SO_SNDBUF and SO_RCVBUF; 0 keeps the kernel's autotuning
  // TCP congestion control algorithms to try in order; the first the kernel accepts is used
  // (names outside net.ipv4.tcp_allowed_congestion_control need CAP_NET_ADMIN). Empty keeps
  // the system default.
  std::vector<std::string> congestion;
  // When none of `congestion` is accepted: InvalidArgument naming what the kernel offers
  // (true), or the system default is kept (false).
  bool congestion_required = false;
};

// Applies `tuning` to a TCP socket. Throws InvalidArgument as SocketTuning says.
void apply_tuning(int fd, const SocketTuning& tuning);
// Applies `tuning` to a throwaway socket: finds a refused setting before any connection.
void check_tuning(const SocketTuning& tuning);
// The congestion control algorithm of a TCP socket ("cubic", "bbr", ...).
std::string congestion_control(int fd);

// Listens on host:port (port 0 picks a free one). host "" or "0.0.0.0" binds all IPv4.
Fd listen_tcp(const std::string& host, uint16_t port, int backlog = 512,
              const SocketTuning& tuning = {});
// The local port / numeric address a socket is bound to.
uint16_t local_port(int fd);
std::string local_address(int fd);
// The numeric address of the connected peer, "addr:port" (for log messages).
std::string peer_name(int fd);

// Connects, retrying refused attempts until the deadline (the listener may not be up yet).
// The result has TCP_NODELAY set.
Fd connect_tcp(const Endpoint& to, Deadline deadline, const SocketTuning& tuning = {});
// Accepts one connection; TimeoutError when none arrives in time.
Fd accept_tcp(int listen_fd, Deadline deadline);

void set_nonblocking(int fd);
void set_nodelay(int fd);
// Bigger kernel buffers help large transfers on loopback and fast links.
void set_buffer_sizes(int fd, int bytes);

// Sends/receives exactly n bytes. `what` names the operation in error messages.
void send_all(int fd, const void* data, size_t n, Deadline deadline, const char* what);
void recv_all(int fd, void* data, size_t n, Deadline deadline, const char* what);
// recv_all of n bytes into `out` (replacing it), the buffer growing as they arrive (64 KiB,
// then doubling): a peer that announces n and sends less pins about twice what it sent.
void recv_growing(int fd, std::string& out, size_t n, Deadline deadline, const char* what);

// Receives what has arrived, 1..n bytes, waiting for the first; 0 means the peer closed
// before sending anything (a clean end between messages). TimeoutError past `deadline`.
size_t recv_some(int fd, void* data, size_t n, Deadline deadline, const char* what);

// Waits until fd is readable (events=POLLIN) or writable (POLLOUT). Returns false on timeout.
bool wait_fd(int fd, short events, Deadline deadline);

}  // namespace chorus::net
