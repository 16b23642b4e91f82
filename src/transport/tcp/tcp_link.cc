#include "transport/tcp/tcp_link.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "chorus/error.h"

namespace chorus::transport {
namespace {

// Fewer unread bytes than this at the end of the incoming buffer are moved to its start
// before the next recv, so that no element (at most 8 bytes) is cut in two for a reader
// that peeks.
constexpr size_t kMinPeek = 8;

// Where in its page each staging buffer starts. Measured on loopback (docs/algorithms.md):
// the kernel's copy from user memory into the socket's pages runs about 1.5x slower when
// the user buffer starts at offset 0 of its page — where the socket's pages start too (4K
// aliasing in the copy) — and large caller buffers are usually page-aligned. Sending from
// this offset avoids that, and it shifts the received bytes in the socket's pages, so the
// receiver's copy out of them is fast into page-aligned memory too. The incoming staging
// keeps an offset of its own, measured when every receive went through it.
constexpr size_t kSendOffset = 1088, kRecvOffset = 2112;
// Only caller memory within this many bytes of a page boundary is staged to be sent (for
// the reason above); elsewhere in its page (libtorch's tensors start 64 bytes in) it goes
// to the kernel as it is.
constexpr uintptr_t kPageEdgeBytes = 64;
// The smallest receive worth a recv() straight into the caller's memory.
constexpr size_t kDirectRecvMin = size_t{64} << 10;

bool near_page_edge(const char* p) {
  uintptr_t in_page = reinterpret_cast<uintptr_t>(p) % 4096;
  return in_page < kPageEdgeBytes || in_page >= 4096 - kPageEdgeBytes;
}

// The outgoing staging starts this big and doubles as sends need.
constexpr size_t kMinSendStaging = size_t{64} << 10;

size_t send_staging_for(size_t bytes) {
  size_t size = kMinSendStaging;
  while (size < bytes && size < TcpLink::kSendStagingBytes) size *= 2;
  return size;
}

}  // namespace

TcpLink::Staging::Staging(size_t offset, size_t bytes) : size_(bytes) {
  void* base = nullptr;
  if (::posix_memalign(&base, 4096, offset + bytes) != 0) throw std::bad_alloc();
  base_.reset(static_cast<char*>(base));
  data_ = base_.get() + offset;
}

TcpLink::TcpLink(int peer, net::Fd fd, std::string label)
    : Link(peer), fd_(std::move(fd)), label_(std::move(label)) {
  net::set_nonblocking(fd_.get());
  net::set_nodelay(fd_.get());  // a no-op on Unix sockets
}

size_t TcpLink::try_send(const void* data, size_t n) {
  if (n == 0) return 0;
  const char* src = static_cast<const char*>(data);
  bool continues = out_sent_ < out_staged_ && src == out_src_ + out_sent_;
  if (continues) return send_staged();
  out_sent_ = out_staged_ = 0;  // a caller that moved elsewhere gave up what was staged
  if (!near_page_edge(src)) return send_some(src, std::min(n, kSendStagingBytes));
  out_staged_ = std::min(n, kSendStagingBytes);
  if (!out_ || out_->size() < out_staged_) {
    out_.emplace(kSendOffset, send_staging_for(out_staged_));
  }
  std::memcpy(out_->data(), src, out_staged_);
  out_src_ = src;
  return send_staged();
}

size_t TcpLink::send_staged() {
  size_t k = send_some(out_->data() + out_sent_, out_staged_ - out_sent_);
  out_sent_ += k;
  return k;
}

size_t TcpLink::send_some(const char* at, size_t n) {
  for (;;) {
    ssize_t k = ::send(fd_.get(), at, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    CHORUS_THROW(IoError, "send to ", describe(), " failed: ", std::strerror(errno));
  }
}

ssize_t TcpLink::recv_some(char* at, size_t n) {
  for (;;) {
    ssize_t k = ::recv(fd_.get(), at, n, MSG_DONTWAIT);
    if (k > 0) return k;
    if (k == 0) CHORUS_THROW(IoError, "connection closed by ", describe());
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    CHORUS_THROW(IoError, "receive from ", describe(), " failed: ", std::strerror(errno));
  }
}

void TcpLink::fill() {
  size_t unread = in_end_ - in_begin_;
  if (unread >= kMinPeek) return;
  if (!in_) in_.emplace(kRecvOffset, kRecvStagingBytes);
  if (unread > 0) std::memmove(in_->data(), in_->data() + in_begin_, unread);
  in_begin_ = 0;
  in_end_ = unread;
  in_end_ += static_cast<size_t>(recv_some(in_->data() + in_end_, kRecvStagingBytes - in_end_));
}

size_t TcpLink::try_recv(void* data, size_t n) {
  if (n == 0) return 0;
  if (in_begin_ == in_end_) {
    if (n >= kDirectRecvMin) return static_cast<size_t>(recv_some(static_cast<char*>(data), n));
    fill();
  }
  size_t k = std::min(n, in_end_ - in_begin_);
  if (k > 0) std::memcpy(data, in_->data() + in_begin_, k);
  in_begin_ += k;
  return k;
}

const char* TcpLink::peek_recv(size_t* available) {
  fill();
  *available = in_end_ - in_begin_;
  return in_->data() + in_begin_;
}

void TcpLink::consume_recv(size_t n) { in_begin_ += n; }

void TcpLink::abort() noexcept { ::shutdown(fd_.get(), SHUT_RDWR); }

std::string TcpLink::describe() const {
  return "tcp to rank " + std::to_string(peer()) + " (" + label_ + ")";
}

}  // namespace chorus::transport
