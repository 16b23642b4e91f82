// What a connecting rank says after the HMAC handshake (rendezvous/auth.h) and before the
// connection becomes a Link: who it is and which group (mesh) it belongs to, so that a
// connection from another job, another attempt of this job, or a confused process is
// rejected even when it knows the secret. Layout in docs/wire_format.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::transport {

enum class LinkKind : uint16_t { kNone = 0, kTcp = 1, kShm = 2 };
const char* link_kind_name(LinkKind kind);

using Token = std::array<uint8_t, 16>;
// 16 bytes from the OS's random source.
Token random_token();
std::string token_hex(const Token& token);
// Parses 32 hex digits; false when malformed.
bool parse_token_hex(const std::string& text, Token& out);

struct Hello {
  LinkKind kind = LinkKind::kNone;
  uint32_t from_rank = 0;
  uint32_t to_rank = 0;
  uint32_t size = 0;
  uint64_t ring_bytes = 0;  // shm only: bytes per ring in the passed segment
  Token group{};            // the mesh's identity (rank 0's token)
  Token token{};            // the sender's own token, as it published it in the store

  static constexpr size_t kWireBytes = 64;
  void encode(uint8_t* out) const;
  // False on a bad magic or version.
  bool decode(const uint8_t* in);
};

// The acceptor's one-word answer to a Hello.
enum class HelloStatus : uint32_t {
  kAccepted = 0,
  kWrongGroup = 1,     // another mesh (job or attempt)
  kWrongIdentity = 2,  // rank/token/size do not match what the store says
  kUnexpected = 3,     // not a rank that connects to us, or already connected
  kWrongRingSize = 4,  // shm: its ring size is not this rank's
};
constexpr size_t kReplyBytes = 8;
void encode_reply(HelloStatus status, uint8_t* out);
// False on a bad magic; else sets status.
bool decode_reply(const uint8_t* in, HelloStatus& status);
const char* hello_status_text(HelloStatus status);

}  // namespace chorus::transport

namespace chorus::transport {

// Rethrows the exception being handled as the same chorus error type with `context`
// prepended to its message (so setup errors name this rank, the peer and the step).
// REQUIRES: called inside a catch block.
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace chorus::transport
