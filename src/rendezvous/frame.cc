#include "rendezvous/frame.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "chorus/error.h"
#include "util/net.h"

namespace chorus::rendezvous {
namespace {

// strs() reserves at most this many entries up front; longer lists grow as they parse.
constexpr uint32_t kListReserve = 1024;

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
}

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

void encode_header(const FrameHeader& header, unsigned char out[kFrameHeaderBytes]) {
  put_le(out, header.magic, 4);
  put_le(out + 4, header.version, 2);
  put_le(out + 6, header.type, 2);
  put_le(out + 8, header.length, 4);
}

FrameHeader decode_header(const unsigned char in[kFrameHeaderBytes], uint32_t max_length) {
  FrameHeader h;
  h.magic = static_cast<uint32_t>(get_le(in, 4));
  h.version = static_cast<uint16_t>(get_le(in + 4, 2));
  h.type = static_cast<uint16_t>(get_le(in + 6, 2));
  h.length = static_cast<uint32_t>(get_le(in + 8, 4));
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
  out_.push_back(static_cast<char>(v));
  return *this;
}

PayloadWriter& PayloadWriter::u32(uint32_t v) {
  unsigned char b[4];
  put_le(b, v, 4);
  out_.append(reinterpret_cast<char*>(b), 4);
  return *this;
}

PayloadWriter& PayloadWriter::i64(int64_t v) {
  unsigned char b[8];
  put_le(b, static_cast<uint64_t>(v), 8);
  out_.append(reinterpret_cast<char*>(b), 8);
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

const char* PayloadReader::take(size_t n) {
  if (n > data_.size() - pos_) {
    CHORUS_THROW(IoError, "malformed payload: wants ", n, " bytes at offset ", pos_, " of ",
                 data_.size());
  }
  const char* p = data_.data() + pos_;
  pos_ += n;
  return p;
}

uint8_t PayloadReader::u8() { return static_cast<uint8_t>(*take(1)); }

uint32_t PayloadReader::u32() {
  return static_cast<uint32_t>(get_le(reinterpret_cast<const unsigned char*>(take(4)), 4));
}

int64_t PayloadReader::i64() {
  return static_cast<int64_t>(get_le(reinterpret_cast<const unsigned char*>(take(8)), 8));
}

std::string PayloadReader::str() {
  uint32_t n = u32();
  const char* p = take(n);  // bounds-checked before the copy
  return std::string(p, n);
}

std::vector<std::string> PayloadReader::strs() {
  uint32_t count = u32();
  if (count > kMaxListStrings) {
    CHORUS_THROW(IoError, "malformed payload: list of ", count, " strings is over the limit of ",
                 kMaxListStrings);
  }
  // Each entry needs at least its 4-byte length: refuse counts the payload cannot hold.
  if (count > (data_.size() - pos_) / 4) {
    CHORUS_THROW(IoError, "malformed payload: list of ", count, " strings in ", data_.size() - pos_,
                 " bytes");
  }
  // An empty string costs 4 bytes on the wire but 32 here: reserve only a little up front.
  std::vector<std::string> out;
  out.reserve(std::min(count, kListReserve));
  for (uint32_t i = 0; i < count; ++i) out.push_back(str());
  return out;
}

void PayloadReader::finish() const {
  if (pos_ != data_.size()) {
    CHORUS_THROW(IoError, "malformed payload: ", data_.size() - pos_, " trailing bytes");
  }
}

}  // namespace chorus::rendezvous
