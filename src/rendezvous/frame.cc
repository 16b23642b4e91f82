#include "rendezvous/frame.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "chorus/error.h"
#include "util/byte_order.h"
#include "util/net.h"

namespace chorus::rendezvous {
namespace {

// strs() reserves at most this many entries up front; longer lists grow as they parse.
constexpr uint32_t kListReserve = 1024;

}  // namespace

void encode_header(const FrameHeader& header, unsigned char out[kFrameHeaderBytes]) {
  byte_order::store_u32(out, header.magic);
  byte_order::store_u16(out + 4, header.version);
  byte_order::store_u16(out + 6, header.type);
  byte_order::store_u32(out + 8, header.length);
}

FrameHeader decode_header(const unsigned char in[kFrameHeaderBytes], uint32_t max_length) {
  FrameHeader h;
  h.magic = byte_order::load_u32(in);
  h.version = byte_order::load_u16(in + 4);
  h.type = byte_order::load_u16(in + 6);
  h.length = byte_order::load_u32(in + 8);
  if (h.magic != kFrameMagic) {
    CHORUS_THROW(IoError, "bad frame magic 0x", std::hex, h.magic,
                 " (not a chorus peer, or the stream is corrupt)");
  }
  if (h.version != kFrameVersion) {
    CHORUS_THROW(IoError, "unsupported frame version ", h.version, " (this build speaks ",
                 kFrameVersion, ")");
  }
  if (h.length > max_length) {
    CHORUS_THROW(IoError, "frame of ", h.length, " bytes is over the limit of ", max_length,
                 " bytes");
  }
  return h;
}

void write_frame(int fd, uint16_t type, const std::string& payload, Deadline deadline,
                 const char* what) {
  CHORUS_CHECK_ARG(payload.size() <= std::numeric_limits<uint32_t>::max(), what, ": payload of ",
                   payload.size(), " bytes does not fit a frame");
  FrameHeader h;
  h.type = type;
  h.length = static_cast<uint32_t>(payload.size());
  unsigned char header[kFrameHeaderBytes];
  encode_header(h, header);
  net::send_all(fd, header, sizeof(header), deadline, what);
  if (!payload.empty()) net::send_all(fd, payload.data(), payload.size(), deadline, what);
}

bool read_frame(int fd, uint32_t max_length, Deadline deadline, const char* what, Frame& out) {
  unsigned char header[kFrameHeaderBytes];
  size_t got = net::recv_some(fd, header, sizeof(header), deadline, what);
  if (got == 0) return false;
  if (got < sizeof(header)) net::recv_all(fd, header + got, sizeof(header) - got, deadline, what);
  FrameHeader h = decode_header(header, max_length);  // checked before allocating
  out.type = h.type;
  // Not the announced length up front: a peer that announces 64 MiB and trickles bytes
  // would pin 64 MiB per connection until the timeout.
  net::recv_growing(fd, out.payload, h.length, deadline, what);
  return true;
}

PayloadWriter& PayloadWriter::u8(uint8_t v) {
  byte_order::put_u8(out_, v);
  return *this;
}

PayloadWriter& PayloadWriter::u32(uint32_t v) {
  byte_order::put_u32(out_, v);
  return *this;
}

PayloadWriter& PayloadWriter::i64(int64_t v) {
  byte_order::put_i64(out_, v);
  return *this;
}

PayloadWriter& PayloadWriter::f64(double v) {
  byte_order::put_f64(out_, v);
  return *this;
}

PayloadWriter& PayloadWriter::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  out_ += s;
  return *this;
}

PayloadWriter& PayloadWriter::strs(const std::vector<std::string>& list) {
  u32(static_cast<uint32_t>(list.size()));
  for (const auto& s : list) str(s);
  return *this;
}

uint8_t PayloadReader::u8() { return in_.u8(); }
uint32_t PayloadReader::u32() { return in_.u32(); }
int64_t PayloadReader::i64() { return in_.i64(); }
double PayloadReader::f64() { return in_.f64(); }

std::string PayloadReader::str() {
  uint32_t n = u32();
  return std::string(in_.bytes(n));  // bounds-checked before the copy
}

std::vector<std::string> PayloadReader::strs() {
  uint32_t count = u32();
  if (count > kMaxListStrings) {
    CHORUS_THROW(IoError, "malformed payload: list of ", count, " strings is over the limit of ",
                 kMaxListStrings);
  }
  // Each entry needs at least its 4-byte length: refuse counts the payload cannot hold.
  if (count > in_.left() / 4) {
    CHORUS_THROW(IoError, "malformed payload: list of ", count, " strings in ", in_.left(),
                 " bytes");
  }
  // An empty string costs 4 bytes on the wire but 32 here: reserve only a little up front.
  std::vector<std::string> out;
  out.reserve(std::min(count, kListReserve));
  for (uint32_t i = 0; i < count; ++i) out.push_back(str());
  return out;
}

void PayloadReader::finish() const { in_.finish(); }

}  // namespace chorus::rendezvous
