// A Link over a connected stream socket (TCP, or a Unix socketpair in tests). Sends and
// receives go straight between the caller's buffer and the kernel: no staging copy.
#pragma once

#include <string>

#include "transport/link.h"
#include "util/net.h"

namespace chorus::transport {

class TcpLink : public Link {
 public:
  // Takes ownership of a connected socket (made non-blocking here). `label` describes the
  // remote end, e.g. "10.0.0.2:4431".
  TcpLink(int peer, net::Fd fd, std::string label);

  size_t try_send(const void* data, size_t n) override;
  size_t try_recv(void* data, size_t n) override;
  int poll_fd() const override { return fd_.get(); }
  void check_alive() override {}
  void abort() noexcept override;
  std::string describe() const override;

 private:
  net::Fd fd_;
  std::string label_;
};

}  // namespace chorus::transport
