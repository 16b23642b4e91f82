#include "transport/tcp/tcp_link.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "chorus/error.h"
#include "util/byte_order.h"

namespace chorus::transport {
namespace {

// Fewer unread bytes than this at the end of the incoming buffer are moved to its start
// before the next recv, so that no element (at most 8 bytes) is cut in two for a reader
// that peeks.
constexpr size_t kMinPeek = 8;

// Where in its page each staging buffer starts. The kernel's copies between user memory
// and the socket's pages run up to 1.5-2x slower at equal offsets in the page (4K aliasing,
// our reading; docs/algorithms.md). The socket's pages hold a message from a page start
// when the link was drained, and large caller buffers are page-aligned too, so staged
// sends start as far into a page as a framed message's pad puts the message. The incoming
// staging keeps an offset of its own, measured when every receive went through it.
constexpr size_t kSendOffset = TcpLink::kPadBytes, kRecvOffset = 2112;
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

void TcpLink::begin_message(bool is_send, size_t bytes) {
  if (bytes < kFramedMin) return;
  if (is_send) {
    byte_order::store_u32(pad_out_.data(), kPadMagic);
    byte_order::store_u64(pad_out_.data() + 8, bytes);
    pad_out_done_ = 0;
    framed_left_ = bytes;
  } else {
    pad_in_done_ = 0;
    framed_expected_ = bytes;
  }
}

size_t TcpLink::try_send(const void* data, size_t n) {
  if (n == 0) return 0;
  const char* src = static_cast<const char*>(data);
  if (framed_left_ > 0) return send_framed(src, n);
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

size_t TcpLink::send_framed(const char* src, size_t n) {
  size_t data = std::min({n, framed_left_, kSendStagingBytes});
  size_t pad = kPadBytes - pad_out_done_;
  iovec iov[2] = {{pad_out_.data() + pad_out_done_, pad}, {const_cast<char*>(src), data}};
  size_t k = pad > 0 ? send_iov(iov, 2) : send_iov(iov + 1, 1);
  size_t pad_sent = std::min(k, pad);
  pad_out_done_ += pad_sent;
  framed_left_ -= k - pad_sent;
  return k - pad_sent;
}

size_t TcpLink::send_some(const char* at, size_t n) {
  iovec iov{const_cast<char*>(at), n};
  return send_iov(&iov, 1);
}

size_t TcpLink::send_iov(iovec* iov, size_t count) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = count;
  for (;;) {
    ssize_t k = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    const int err = errno;  // before the message's allocations
    throw_broken("send to " + describe() + " failed: " + std::strerror(err),
                 err == EPIPE || err == ECONNRESET);
  }
}

ssize_t TcpLink::recv_some(char* at, size_t n) {
  for (;;) {
    ssize_t k = ::recv(fd_.get(), at, n, MSG_DONTWAIT);
    if (k > 0) return k;
    if (k == 0) throw_broken("connection closed by " + describe(), true);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    const int err = errno;
    throw_broken("receive from " + describe() + " failed: " + std::strerror(err),
                 err == ECONNRESET);
  }
}

void TcpLink::throw_broken(const std::string& what, bool peer_gone) const {
  if (locally_aborted_.load(std::memory_order_relaxed)) {
    CHORUS_THROW(IoError, what, " after this rank aborted the link");
  }
  std::string reason =
      peer_gone && abort_notes_ != nullptr ? abort_notes_->peer_reason(peer()) : "";
  if (reason.empty()) CHORUS_THROW(IoError, what);
  CHORUS_THROW(IoError, what, ": the peer aborted the link (", reason, ")");
}

TcpLink::Staging& TcpLink::incoming() {
  if (!in_) in_.emplace(kRecvOffset, kRecvStagingBytes);
  return *in_;
}

void TcpLink::fill() {
  size_t unread = in_end_ - in_begin_;
  if (unread >= kMinPeek) return;
  char* in = incoming().data();
  if (unread > 0) std::memmove(in, in + in_begin_, unread);
  in_begin_ = 0;
  in_end_ = unread;
  in_end_ += static_cast<size_t>(recv_some(in + in_end_, kRecvStagingBytes - in_end_));
}

bool TcpLink::take_pad() {
  if (pad_in_done_ == kPadBytes) return true;
  while (pad_in_done_ < kPadBytes) {
    size_t want = kPadBytes - pad_in_done_;
    char* to = pad_in_.data() + pad_in_done_;
    size_t k = std::min(want, in_end_ - in_begin_);
    if (k > 0) {
      std::memcpy(to, in_->data() + in_begin_, k);
      in_begin_ += k;
    } else {
      k = static_cast<size_t>(recv_some(to, want));
      if (k == 0) return false;
    }
    pad_in_done_ += k;
  }
  uint32_t magic = byte_order::load_u32(pad_in_.data());
  uint64_t bytes = byte_order::load_u64(pad_in_.data() + 8);
  if (magic != kPadMagic || bytes != framed_expected_) {
    std::string got = magic == kPadMagic ? "a message of " + std::to_string(bytes) + " bytes"
                                         : "no message header";
    CHORUS_THROW(IoError, describe(), " is out of step: this rank expects a message of ",
                 framed_expected_, " bytes, the peer sent ", got,
                 " (different collectives or sizes on the two ranks?)");
  }
  return true;
}

size_t TcpLink::try_recv(void* data, size_t n) {
  if (n == 0) return 0;
  if (!take_pad()) return 0;
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
  *available = 0;
  if (!take_pad()) return incoming().data() + in_begin_;
  fill();
  *available = in_end_ - in_begin_;
  return in_->data() + in_begin_;
}

void TcpLink::consume_recv(size_t n) { in_begin_ += n; }

void TcpLink::abort(std::string_view /*reason*/) noexcept {
  locally_aborted_.store(true, std::memory_order_relaxed);
  ::shutdown(fd_.get(), SHUT_RDWR);
}

std::string TcpLink::describe() const {
  return "tcp to rank " + std::to_string(peer()) + " (" + label_ + ")";
}

}  // namespace chorus::transport
