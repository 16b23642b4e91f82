// What the fuzz targets share: bytes fed to a reader through a socket or a file, and the
// rule each target checks. A parser given any bytes must return or throw a chorus::Error
// (the documented IoError, AuthError, InvalidArgument, ...): anything else — a crash, a
// sanitizer report, another exception (std::out_of_range from a stoi, std::length_error,
// std::bad_alloc), a hang, memory past libFuzzer's -rss_limit_mb — is a finding.
#pragma once

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "chorus/error.h"
#include "util/deadline.h"
#include "util/net.h"

namespace chorus::fuzz {

// How long a reader may wait on a fed socket. Every byte is there before it starts and the
// stream then ends, so a reader that waits this long has missed the end: a hang.
inline Deadline io_deadline() { return Deadline::after(std::chrono::seconds(5)); }

// Runs `parse`; a chorus::Error is the expected answer to bad bytes and is swallowed.
template <class F>
void expect_chorus_errors(F&& parse) {
  try {
    parse();
  } catch (const chorus::Error&) {
  }
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Plays a peer on `fd` from a thread of its own: writes the input, shuts the socket for
// writing, and reads (and drops) whatever comes back until the other side closes, so
// neither side can fill the other's buffer and stall. join() waits for that close.
class Pump {
 public:
  Pump(int fd, const uint8_t* data, size_t size)
      : thread_([fd, data, size] { run(fd, data, size); }) {}
  ~Pump() { join(); }
  Pump(const Pump&) = delete;
  Pump& operator=(const Pump&) = delete;
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  static void run(int fd, const uint8_t* data, size_t size) {
    size_t sent = 0;
    bool open_for_write = true;
    char sink[65536];
    for (;;) {
      if (open_for_write && sent == size) {
        ::shutdown(fd, SHUT_WR);
        open_for_write = false;
      }
      pollfd p{fd, static_cast<short>(POLLIN | (open_for_write ? POLLOUT : 0)), 0};
      if (::poll(&p, 1, 1000) < 0 && errno != EINTR) return;
      if (open_for_write && (p.revents & POLLOUT)) {
        ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) sent += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EINTR) open_for_write = false;
      }
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
      }
    }
  }

  std::thread thread_;
};

// A connected pair of non-blocking Unix stream sockets with a Pump feeding the input into
// one end; the code under test uses fd(), the other. Destroying the pair closes fd()'s
// side (the pump sees EOF) and joins the pump.
class FedSocket {
 public:
  FedSocket(const uint8_t* data, size_t size) : FedSocket(make_pair(), data, size) {}
  ~FedSocket() {
    ::shutdown(mine_.get(), SHUT_RDWR);
    pump_.join();
  }
  FedSocket(const FedSocket&) = delete;
  FedSocket& operator=(const FedSocket&) = delete;

  int fd() const { return mine_.get(); }

 private:
  struct Pair {
    int mine, peer;
  };
  static Pair make_pair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) != 0) {
      std::abort();
    }
    return {fds[0], fds[1]};
  }
  FedSocket(Pair pair, const uint8_t* data, size_t size)
      : mine_(pair.mine), peer_(pair.peer), pump_(pair.peer, data, size) {}

  net::Fd mine_, peer_;  // declared before pump_: closed after it is joined
  Pump pump_;
};

// The input as a file that readers taking a path can open: an anonymous memfd, named by
// its /proc/self/fd path (no disk, nothing left behind).
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(::memfd_create("chorus-fuzz", MFD_CLOEXEC)) {
    if (!fd_.valid()) std::abort();
    for (size_t done = 0; done < size;) {
      ssize_t n = ::write(fd_.get(), data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_.get());
  }
  const std::string& path() const { return path_; }

 private:
  net::Fd fd_;
  std::string path_;
};

}  // namespace chorus::fuzz
