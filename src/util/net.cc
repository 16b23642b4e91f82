#include "util/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "chorus/error.h"

namespace chorus::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string Endpoint::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Endpoint Endpoint::parse(const std::string& text) {
  Endpoint ep;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    CHORUS_CHECK_ARG(
        close != std::string::npos && close + 1 < text.size() && text[close + 1] == ':',
        "malformed address '", text, "' (expected [ipv6]:port)");
    ep.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    CHORUS_CHECK_ARG(colon != std::string::npos && colon > 0, "malformed address '", text,
                     "' (expected host:port)");
    ep.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  char* end = nullptr;
  errno = 0;
  long port = port_text.empty() ? -1 : std::strtol(port_text.c_str(), &end, 10);
  CHORUS_CHECK_ARG(errno == 0 && end && *end == '\0' && port >= 1 && port <= 65535,
                   "malformed port in address '", text, "'");
  ep.port = static_cast<uint16_t>(port);
  return ep;
}

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const std::string& host, uint16_t port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  std::string service = std::to_string(port);
  const char* node = host.empty() ? nullptr : host.c_str();
  if (passive && host == "0.0.0.0") node = nullptr, hints.ai_family = AF_INET;
  int rc = getaddrinfo(node, service.c_str(), &hints, &out.list);
  if (rc != 0) {
    CHORUS_THROW(IoError, "cannot resolve host '", host, "': ", gai_strerror(rc));
  }
}

std::string format_addr(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

uint16_t addr_port(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

}  // namespace

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    CHORUS_THROW(IoError, "fcntl(O_NONBLOCK) failed: ", std::strerror(errno));
  }
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_buffer_sizes(int fd, int bytes) {
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

namespace {

std::string first_line_of(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "?" : line;
}

}  // namespace

void apply_tuning(int fd, const SocketTuning& tuning) {
  if (tuning.buffer_bytes > 0) set_buffer_sizes(fd, tuning.buffer_bytes);
  for (const std::string& name : tuning.congestion) {
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), name.size()) == 0) return;
  }
  if (tuning.congestion.empty() || !tuning.congestion_required) return;
  std::string names;
  for (const std::string& name : tuning.congestion) names += (names.empty() ? "" : ",") + name;
  CHORUS_THROW(InvalidArgument, "TCP congestion control '", names,
               "': the kernel accepts none of these (available: ",
               first_line_of("/proc/sys/net/ipv4/tcp_available_congestion_control"),
               "; allowed without CAP_NET_ADMIN: ",
               first_line_of("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), ")");
}

void check_tuning(const SocketTuning& tuning) {
  Fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (probe.valid()) apply_tuning(probe.get(), tuning);
}

std::string congestion_control(int fd) {
  char name[64] = {};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

Fd listen_tcp(const std::string& host, uint16_t port, int backlog, const SocketTuning& tuning) {
  AddrInfo ai;
  resolve(host, port, true, ai);
  std::string last_error = "no address";
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd.valid()) continue;
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    apply_tuning(fd.get(), tuning);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), backlog) == 0) {
      return fd;
    }
    last_error = std::strerror(errno);
  }
  CHORUS_THROW(IoError, "cannot listen on ", Endpoint{host, port}.to_string(), ": ", last_error);
}

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  return addr_port(ss);
}

std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return format_addr(ss);
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return Endpoint{format_addr(ss), addr_port(ss)}.to_string();
}

size_t recv_some(int fd, void* data, size_t n, Deadline deadline, const char* what) {
  for (;;) {
    ssize_t k = ::recv(fd, data, n, 0);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      CHORUS_THROW(IoError, what, ": receive from ", peer_name(fd),
                   " failed: ", std::strerror(errno));
    }
    if (!wait_fd(fd, POLLIN, deadline)) {
      CHORUS_THROW(TimeoutError, what, ": nothing from ", peer_name(fd), " in time");
    }
  }
}

bool wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) CHORUS_THROW(IoError, "poll failed: ", std::strerror(errno));
  }
}

namespace {

// One connect attempt; returns an fd connected (or still connecting) or an invalid Fd.
Fd try_connect(const addrinfo* a, Deadline deadline, const SocketTuning& tuning,
               std::string& error) {
  Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
  if (!fd.valid()) {
    error = std::strerror(errno);
    return Fd();
  }
  apply_tuning(fd.get(), tuning);
  if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    error = std::strerror(errno);
    return Fd();
  }
  if (!wait_fd(fd.get(), POLLOUT, deadline)) {
    error = "timed out";
    return Fd();
  }
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    error = std::strerror(err);
    return Fd();
  }
  return fd;
}

}  // namespace

Fd connect_tcp(const Endpoint& to, Deadline deadline, const SocketTuning& tuning) {
  std::string error = "no address";
  auto backoff = std::chrono::milliseconds(5);
  for (;;) {
    AddrInfo ai;
    resolve(to.host, to.port, false, ai);
    for (addrinfo* a = ai.list; a; a = a->ai_next) {
      Fd fd = try_connect(a, deadline, tuning, error);
      if (fd.valid()) {
        set_nodelay(fd.get());
        return fd;
      }
    }
    if (deadline.expired()) {
      CHORUS_THROW(TimeoutError, "cannot connect to ", to.to_string(), ": ", error);
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

Fd accept_tcp(int listen_fd, Deadline deadline) {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      set_nodelay(fd);
      return Fd(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      CHORUS_THROW(IoError, "accept failed: ", std::strerror(errno));
    }
    if (!wait_fd(listen_fd, POLLIN, deadline)) {
      CHORUS_THROW(TimeoutError, "no connection arrived on port ", local_port(listen_fd),
                   " in time");
    }
  }
}

void send_all(int fd, const void* data, size_t n, Deadline deadline, const char* what) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        CHORUS_THROW(TimeoutError, what, ": send to ", peer_name(fd), " timed out with ", n,
                     " bytes left");
      }
      continue;
    }
    CHORUS_THROW(IoError, what, ": send to ", peer_name(fd), " failed: ", std::strerror(errno));
  }
}

void recv_all(int fd, void* data, size_t n, Deadline deadline, const char* what) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) CHORUS_THROW(IoError, what, ": connection closed by peer ", peer_name(fd));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline)) {
        CHORUS_THROW(TimeoutError, what, ": receive from ", peer_name(fd), " timed out with ", n,
                     " bytes left");
      }
      continue;
    }
    CHORUS_THROW(IoError, what, ": receive from ", peer_name(fd),
                 " failed: ", std::strerror(errno));
  }
}

void recv_growing(int fd, std::string& out, size_t n, Deadline deadline, const char* what) {
  constexpr size_t kFirstStep = size_t{64} << 10;
  out.clear();
  while (out.size() < n) {
    size_t have = out.size();
    out.resize(std::min(n, std::max(kFirstStep, 2 * have)));
    recv_all(fd, out.data() + have, out.size() - have, deadline, what);
  }
}

}  // namespace chorus::net
