#include "transport/shm/unix_socket.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "chorus/error.h"

namespace chorus::transport::unix_socket {
namespace {

socklen_t make_address(const std::string& name, sockaddr_un& addr) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  CHORUS_CHECK_ARG(name.size() + 1 <= sizeof(addr.sun_path), "abstract socket name too long");
  addr.sun_path[0] = '\0';  // abstract namespace: no file is created
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

std::string random_name() {
  unsigned char bytes[12];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t k = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (k < 0 && errno != EINTR) CHORUS_THROW(IoError, "getrandom failed: ", std::strerror(errno));
    if (k > 0) got += static_cast<size_t>(k);
  }
  std::string name = "chorus-shm-";
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    name += hex;
  }
  return name;
}

net::Fd new_socket() {
  net::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) CHORUS_THROW(IoError, "socket(AF_UNIX) failed: ", std::strerror(errno));
  return fd;
}

void wait_or_throw(int fd, short events, Deadline deadline, const char* what) {
  if (!net::wait_fd(fd, events, deadline)) {
    CHORUS_THROW(TimeoutError, what, ": timed out on a local (unix socket) connection");
  }
}

}  // namespace

net::Fd listen_abstract(std::string& name) {
  net::Fd fd = new_socket();
  name = random_name();
  sockaddr_un addr;
  socklen_t len = make_address(name, addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(fd.get(), 512) != 0) {
    CHORUS_THROW(IoError, "cannot listen on abstract unix socket ", name, ": ",
                 std::strerror(errno));
  }
  return fd;
}

net::Fd connect_abstract(const std::string& name, Deadline deadline) {
  net::Fd fd = new_socket();
  sockaddr_un addr;
  socklen_t len = make_address(name, addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) return fd;
  if (errno != EINPROGRESS && errno != EAGAIN) {
    CHORUS_THROW(IoError, "cannot connect to abstract unix socket ", name, ": ",
                 std::strerror(errno),
                 " (is the peer on this host and in this network namespace?)");
  }
  // A full backlog: wait for the listener to make room.
  wait_or_throw(fd.get(), POLLOUT, deadline, "connect to a local peer");
  int err = 0;
  socklen_t err_len = sizeof(err);
  getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &err_len);
  if (err != 0) {
    CHORUS_THROW(IoError, "cannot connect to abstract unix socket ", name, ": ",
                 std::strerror(err));
  }
  return fd;
}

net::Fd try_accept(int listen_fd) {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return net::Fd(fd);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return net::Fd();
    CHORUS_THROW(IoError, "accept on unix socket failed: ", std::strerror(errno));
  }
}

void send_with_fd(int fd, const void* data, size_t n, int pass_fd, Deadline deadline,
                  const char* what) {
  auto* p = static_cast<const char*>(data);
  bool fd_pending = pass_fd >= 0;
  while (n > 0) {
    iovec iov{const_cast<char*>(p), n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (fd_pending) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
    }
    ssize_t k = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      fd_pending = false;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_or_throw(fd, POLLOUT, deadline, what);
      continue;
    }
    CHORUS_THROW(IoError, what, ": send on unix socket failed: ", std::strerror(errno));
  }
}

namespace {

// Takes ownership of every descriptor in the control data; keeps the first one.
void collect_fds(msghdr& msg, net::Fd& out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (!out.valid()) {
        out.reset(fd);
      } else {
        net::Fd extra(fd);  // closed: we expect one descriptor only
      }
    }
  }
}

}  // namespace

net::Fd recv_with_fd(int fd, void* data, size_t n, Deadline deadline, const char* what) {
  auto* p = static_cast<char*>(data);
  net::Fd passed;
  while (n > 0) {
    iovec iov{p, n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t k = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (k > 0) {
      collect_fds(msg, passed);
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) CHORUS_THROW(IoError, what, ": local peer closed the unix socket");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_or_throw(fd, POLLIN, deadline, what);
      continue;
    }
    CHORUS_THROW(IoError, what, ": receive on unix socket failed: ", std::strerror(errno));
  }
  return passed;
}

}  // namespace chorus::transport::unix_socket
