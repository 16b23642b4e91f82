#include "transport/tcp/tcp_link.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chorus/error.h"

namespace chorus::transport {

TcpLink::TcpLink(int peer, net::Fd fd, std::string label)
    : Link(peer), fd_(std::move(fd)), label_(std::move(label)) {
  net::set_nonblocking(fd_.get());
}

namespace {
// Bytes handed to the kernel per call. On loopback the sender's core copies all of it into
// the receiver's queue at once; smaller pieces let the progress loop interleave receiving
// (and reducing) so the working set stays in cache.
constexpr size_t kMaxSendPiece = size_t{256} << 10;
}  // namespace

size_t TcpLink::try_send(const void* data, size_t n) {
  if (n == 0) return 0;
  n = std::min(n, kMaxSendPiece);
  for (;;) {
    ssize_t k = ::send(fd_.get(), data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    CHORUS_THROW(IoError, "send to ", describe(), " failed: ", std::strerror(errno));
  }
}

size_t TcpLink::try_recv(void* data, size_t n) {
  if (n == 0) return 0;
  for (;;) {
    ssize_t k = ::recv(fd_.get(), data, n, MSG_DONTWAIT);
    if (k > 0) return static_cast<size_t>(k);
    if (k == 0) CHORUS_THROW(IoError, "connection closed by ", describe());
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    CHORUS_THROW(IoError, "receive from ", describe(), " failed: ", std::strerror(errno));
  }
}

void TcpLink::abort() noexcept { ::shutdown(fd_.get(), SHUT_RDWR); }

std::string TcpLink::describe() const {
  return "tcp to rank " + std::to_string(peer()) + " (" + label_ + ")";
}

}  // namespace chorus::transport
