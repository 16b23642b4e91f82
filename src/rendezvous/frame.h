// Framed messages on an authenticated stream (docs/wire_format.md, "Store and handshake").
// Every frame starts with a 12-byte little-endian header
//   magic uint32 ("CHRS" on the wire) | version uint16 | type uint16 | length uint32
// followed by `length` payload bytes. The reader checks magic, version and
// `length <= max_length` before allocating anything, so a stray or hostile peer cannot make
// us allocate gigabytes from four bytes (the PyTorch TCPStore out-of-memory lesson).
// Thread safety: none; one reader and one writer per descriptor at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/byte_order.h"
#include "util/deadline.h"

namespace chorus::rendezvous {

constexpr uint32_t kFrameMagic = 0x53524843;  // bytes "CHRS" read as little-endian
constexpr uint16_t kFrameVersion = 1;
constexpr size_t kFrameHeaderBytes = 12;
// The longest list PayloadReader::strs() accepts (docs/wire_format.md): with entries of 4
// bytes each, a 64 MiB frame could otherwise announce 16.7 M strings.
constexpr uint32_t kMaxListStrings = 65536;

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kFrameVersion;
  uint16_t type = 0;
  uint32_t length = 0;
};

struct Frame {
  uint16_t type = 0;
  std::string payload;
};

void encode_header(const FrameHeader& header, unsigned char out[kFrameHeaderBytes]);
// Throws IoError naming the violation on a bad magic, version, or a length above max_length.
FrameHeader decode_header(const unsigned char in[kFrameHeaderBytes], uint32_t max_length);

// Sends one frame. Throws InvalidArgument when the payload does not fit a uint32 length.
void write_frame(int fd, uint16_t type, const std::string& payload, Deadline deadline,
                 const char* what);
// Reads one frame. Returns false when the peer closed the stream cleanly before the first
// header byte (a normal disconnect); a stream that ends mid-frame is an IoError. The payload
// buffer grows as bytes arrive, never far ahead of them, so a peer that announces a large
// frame and then trickles holds little memory.
bool read_frame(int fd, uint32_t max_length, Deadline deadline, const char* what, Frame& out);

// Builds a payload: integers little-endian (util/byte_order.h), strings as uint32 length + bytes.
class PayloadWriter {
 public:
  PayloadWriter& u8(uint8_t v);
  PayloadWriter& u32(uint32_t v);
  PayloadWriter& i64(int64_t v);
  PayloadWriter& f64(double v);  // the IEEE bits, as i64 would send them
  PayloadWriter& str(const std::string& s);
  PayloadWriter& strs(const std::vector<std::string>& list);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Parses a payload. Every length is checked against the bytes left, and a list against
// kMaxListStrings, so a malformed payload is an IoError, never an out-of-bounds read or a
// huge allocation.
class PayloadReader {
 public:
  explicit PayloadReader(const std::string& payload) : in_(payload, "malformed payload") {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  double f64();
  std::string str();
  std::vector<std::string> strs();
  // Throws IoError unless every byte was consumed.
  void finish() const;

 private:
  byte_order::ByteReader in_;
};

}  // namespace chorus::rendezvous
