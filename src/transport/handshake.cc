#include "transport/handshake.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "chorus/error.h"
#include "util/byte_order.h"

namespace chorus::transport {
namespace {

constexpr uint32_t kHelloMagic = 0x4c454843;  // "CHEL" little-endian
constexpr uint32_t kReplyMagic = 0x50524843;  // "CHRP"
// 2 since TCP links frame whole messages of 64 KiB or more (docs/wire_format.md): a peer
// of version 1 would take the pads for data.
constexpr uint16_t kVersion = 2;

}  // namespace

const char* link_kind_name(LinkKind kind) {
  switch (kind) {
    case LinkKind::kTcp:
      return "tcp";
    case LinkKind::kShm:
      return "shm";
    default:
      return "none";
  }
}

Token random_token() {
  Token t;
  size_t got = 0;
  while (got < t.size()) {
    ssize_t k = getrandom(t.data() + got, t.size() - got, 0);
    if (k < 0 && errno != EINTR) CHORUS_THROW(IoError, "getrandom failed: ", std::strerror(errno));
    if (k > 0) got += static_cast<size_t>(k);
  }
  return t;
}

std::string token_hex(const Token& token) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : token) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

bool parse_token_hex(const std::string& text, Token& out) {
  if (text.size() != 2 * out.size()) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

// magic u32 | version u16 | kind u16 | from u32 | to u32 | size u32 | reserved u32 |
// ring_bytes u64 | group[16] | token[16]   (little-endian, 64 bytes)
void Hello::encode(uint8_t* out) const {
  std::memset(out, 0, kWireBytes);
  byte_order::store_u32(out, kHelloMagic);
  byte_order::store_u16(out + 4, kVersion);
  byte_order::store_u16(out + 6, static_cast<uint16_t>(kind));
  byte_order::store_u32(out + 8, from_rank);
  byte_order::store_u32(out + 12, to_rank);
  byte_order::store_u32(out + 16, size);
  byte_order::store_u64(out + 24, ring_bytes);
  std::memcpy(out + 32, group.data(), 16);
  std::memcpy(out + 48, token.data(), 16);
}

bool Hello::decode(const uint8_t* in) {
  if (byte_order::load_u32(in) != kHelloMagic || byte_order::load_u16(in + 4) != kVersion) {
    return false;
  }
  kind = static_cast<LinkKind>(byte_order::load_u16(in + 6));
  from_rank = byte_order::load_u32(in + 8);
  to_rank = byte_order::load_u32(in + 12);
  size = byte_order::load_u32(in + 16);
  ring_bytes = byte_order::load_u64(in + 24);
  std::memcpy(group.data(), in + 32, 16);
  std::memcpy(token.data(), in + 48, 16);
  return true;
}

void encode_reply(HelloStatus status, uint8_t* out) {
  byte_order::store_u32(out, kReplyMagic);
  byte_order::store_u32(out + 4, static_cast<uint32_t>(status));
}

bool decode_reply(const uint8_t* in, HelloStatus& status) {
  if (byte_order::load_u32(in) != kReplyMagic) return false;
  status = static_cast<HelloStatus>(byte_order::load_u32(in + 4));
  return true;
}

const char* hello_status_text(HelloStatus status) {
  switch (status) {
    case HelloStatus::kAccepted:
      return "accepted";
    case HelloStatus::kWrongGroup:
      return "it belongs to another group (job or attempt)";
    case HelloStatus::kWrongIdentity:
      return "its rank, size or token do not match the store";
    case HelloStatus::kUnexpected:
      return "that rank is not expected to connect (or did already)";
    case HelloStatus::kWrongRingSize:
      return "its shared-memory ring size differs from this rank's (CHORUS_SHM_RING_BYTES "
             "or CommunicatorOptions::shm_ring_bytes must be the same on every rank)";
  }
  return "unknown status";
}

}  // namespace chorus::transport

namespace chorus::transport {

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const AuthError& e) {
    throw AuthError(context + e.what());
  } catch (const IoError& e) {
    throw IoError(context + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(context + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(context + e.what());
  }
}

}  // namespace chorus::transport
