#include "wire.h"

#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chorus/error.h"
#include "util/byte_order.h"
#include "util/net.h"

namespace chorus::ps::wire {
namespace {

// Drops the first `n` bytes of the iovec list in place; returns the new first index.
size_t advance(std::vector<iovec>& iov, size_t first, size_t n) {
  while (n > 0) {
    size_t k = std::min(n, iov[first].iov_len);
    iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + k;
    iov[first].iov_len -= k;
    n -= k;
    if (iov[first].iov_len == 0) ++first;
  }
  while (first < iov.size() && iov[first].iov_len == 0) ++first;
  return first;
}

// Moves every byte of `iov` with sendmsg / recvmsg, at most IOV_MAX pieces per call,
// waiting with poll() for the socket up to the deadline.
void transfer(int fd, std::vector<iovec> iov, bool sending, Deadline deadline, const char* what) {
  size_t first = advance(iov, 0, 0);
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = &iov[first];
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    ssize_t k = sending ? ::sendmsg(fd, &msg, MSG_NOSIGNAL) : ::recvmsg(fd, &msg, 0);
    if (k > 0) {
      first = advance(iov, first, static_cast<size_t>(k));
      continue;
    }
    if (k == 0 && !sending)
      CHORUS_THROW(IoError, what, ": connection closed by peer ", net::peer_name(fd));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      CHORUS_THROW(IoError, what, ": ", sending ? "send to " : "receive from ", net::peer_name(fd),
                   " failed: ", std::strerror(errno));
    }
    if (!net::wait_fd(fd, sending ? POLLOUT : POLLIN, deadline)) {
      CHORUS_THROW(TimeoutError, what, ": ", sending ? "send to " : "receive from ",
                   net::peer_name(fd), " timed out");
    }
  }
}

}  // namespace

void send(int fd, Type type, const std::string& meta, const std::vector<Piece>& bulk,
          Deadline deadline, const char* what) {
  uint64_t bulk_bytes = 0;
  for (const Piece& p : bulk) bulk_bytes += p.bytes;
  CHORUS_CHECK_ARG(meta.size() <= kMaxMetaBytes, what, ": ", meta.size(),
                   " bytes of message fields is over the limit of ", kMaxMetaBytes);
  unsigned char header[kHeaderBytes];
  byte_order::store_u32(header, kMagic);
  byte_order::store_u16(header + 4, kVersion);
  byte_order::store_u16(header + 6, static_cast<uint16_t>(type));
  byte_order::store_u32(header + 8, static_cast<uint32_t>(meta.size()));
  byte_order::store_u64(header + 12, bulk_bytes);
  std::vector<iovec> iov;
  iov.reserve(bulk.size() + 2);
  iov.push_back({header, kHeaderBytes});
  iov.push_back({const_cast<char*>(meta.data()), meta.size()});
  for (const Piece& p : bulk) iov.push_back({const_cast<void*>(p.data), p.bytes});
  transfer(fd, std::move(iov), true, deadline, what);
}

bool receive(int fd, Deadline deadline, const char* what, Header& header, std::string& meta) {
  unsigned char raw[kHeaderBytes];
  size_t got = net::recv_some(fd, raw, sizeof(raw), deadline, what);
  if (got == 0) return false;
  if (got < sizeof(raw)) recv_bulk(fd, {{raw + got, sizeof(raw) - got}}, deadline, what);
  uint32_t magic = byte_order::load_u32(raw);
  uint16_t version = byte_order::load_u16(raw + 4);
  if (magic != kMagic) {
    CHORUS_THROW(IoError, what, ": bad message magic 0x", std::hex, magic,
                 " (not a chorus ps peer, or the stream is corrupt)");
  }
  if (version != kVersion) {
    CHORUS_THROW(IoError, what, ": unsupported ps protocol version ", version,
                 " (this build speaks ", kVersion, ")");
  }
  header.type = static_cast<Type>(byte_order::load_u16(raw + 6));
  header.meta_bytes = byte_order::load_u32(raw + 8);
  header.bulk_bytes = byte_order::load_u64(raw + 12);
  if (header.meta_bytes > kMaxMetaBytes) {
    CHORUS_THROW(IoError, what, ": ", header.meta_bytes,
                 " bytes of message fields is over the "
                 "limit of ",
                 kMaxMetaBytes);
  }
  net::recv_growing(fd, meta, header.meta_bytes, deadline, what);  // not the announced length
  return true;
}

void recv_bulk(int fd, const std::vector<Slot>& slots, Deadline deadline, const char* what) {
  std::vector<iovec> iov;
  iov.reserve(slots.size());
  for (const Slot& s : slots) iov.push_back({s.data, s.bytes});
  transfer(fd, std::move(iov), false, deadline, what);
}

void recv_floats_growing(int fd, std::vector<float>& out, size_t n, Deadline deadline,
                         const char* what) {
  if (out.capacity() >= n) {  // already paid for (a connection's scratch, reused)
    out.resize(n);
    recv_bulk(fd, {{out.data(), n * sizeof(float)}}, deadline, what);
    return;
  }
  constexpr size_t kFirstStep = size_t{16} << 10;  // floats: 64 KiB
  out.clear();
  while (out.size() < n) {
    size_t have = out.size();
    out.resize(std::min(n, std::max(kFirstStep, 2 * have)));
    recv_bulk(fd, {{out.data() + have, (out.size() - have) * sizeof(float)}}, deadline, what);
  }
}

}  // namespace chorus::ps::wire
