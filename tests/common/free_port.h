// A loopback TCP port for a test's server to listen on later.
//
// Not from the kernel's ephemeral range (bind to port 0): outgoing connections take their
// local ports from that range too, so under a parallel ctest another test's connection
// could take the port between this call and the server's bind (EADDRINUSE). Instead a
// random port from the 12000 just below the range, checked free by binding it once. A port
// is handed out once per process: a test that takes several before any server binds (a
// TF_CONFIG cluster) must not get one twice, which random draws alone allowed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <unordered_set>

namespace chorus::test {

inline bool can_bind_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

inline uint16_t free_port() {
  int low = 32768;  // Linux's default, if the range cannot be read
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  if (low <= 12000 + 1024) std::abort();  // no room below the range: fix the machine
  static std::mutex mu;
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  static std::unordered_set<uint16_t> given;
  std::lock_guard<std::mutex> lock(mu);
  std::uniform_int_distribution<int> pick(low - 12000, low - 1);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto port = static_cast<uint16_t>(pick(rng));
    if (given.count(port) == 0 && can_bind_loopback(port)) {
      given.insert(port);
      return port;
    }
  }
  std::abort();
}

}  // namespace chorus::test
