// The handshake (docs/wire_format.md, "Store and handshake"): four fixed-size messages,
//   client -> server  HELLO     nonce_c
//   server -> client  CHALLENGE nonce_s
//   client -> server  PROOF     HMAC(secret, "client", purpose, nonce_c, nonce_s)
//   server -> client  ACCEPT    HMAC(secret, "server", purpose, nonce_c, nonce_s)  (or REJECT)
// The client proves itself first so the server never hands a MAC to an unauthenticated
// peer. Both nonces are fresh, so recorded bytes replayed on a new connection fail; the
// role inside the MAC stops a server's answer being reflected back as a client's proof.
#include "rendezvous/auth.h"

#include <sys/socket.h>

#include <cstdint>
#include <cstring>

#include "chorus/error.h"
#include "rendezvous/crypto.h"
#include "util/byte_order.h"
#include "util/net.h"

namespace chorus::rendezvous {
namespace {

constexpr uint32_t kAuthMagic = 0x55414843;  // bytes "CHAU" read as little-endian
constexpr uint16_t kAuthVersion = 1;
constexpr size_t kHeaderBytes = 8;
constexpr size_t kBodyBytes = 32;  // a nonce or a MAC
constexpr size_t kNonceBytes = kBodyBytes;

enum class Kind : uint16_t { kHello = 1, kChallenge = 2, kProof = 3, kAccept = 4, kReject = 5 };

struct Message {
  Kind kind;
  std::string body;
};

std::string encode(Kind kind, const std::string& body) {
  std::string out(kHeaderBytes + kBodyBytes, '\0');
  byte_order::store_u32(&out[0], kAuthMagic);
  byte_order::store_u16(&out[4], kAuthVersion);
  byte_order::store_u16(&out[6], static_cast<uint16_t>(kind));
  std::memcpy(&out[kHeaderBytes], body.data(), std::min(body.size(), kBodyBytes));
  return out;
}

void send_message(int fd, Kind kind, const std::string& body, Deadline deadline) {
  std::string bytes = encode(kind, body);
  net::send_all(fd, bytes.data(), bytes.size(), deadline, "authentication handshake");
}

// Reads the header first and checks it, so a peer speaking another protocol is refused
// as soon as its first 8 bytes arrive instead of after a timeout.
Message recv_message(int fd, Kind expected, Deadline deadline) {
  unsigned char header[kHeaderBytes];
  net::recv_all(fd, header, sizeof(header), deadline, "authentication handshake");
  const std::string peer = net::peer_name(fd);
  if (byte_order::load_u32(header) != kAuthMagic) {
    CHORUS_THROW(AuthError, "authentication failed: ", peer,
                 " did not send a chorus handshake (bad magic)");
  }
  uint16_t version = byte_order::load_u16(header + 4);
  if (version != kAuthVersion) {
    CHORUS_THROW(AuthError, "authentication failed: ", peer, " speaks handshake version ", version,
                 ", this build speaks ", kAuthVersion);
  }
  auto kind = static_cast<Kind>(byte_order::load_u16(header + 6));
  Message msg{kind, std::string(kBodyBytes, '\0')};
  net::recv_all(fd, msg.body.data(), kBodyBytes, deadline, "authentication handshake");
  if (kind != expected && kind != Kind::kReject) {
    CHORUS_THROW(AuthError, "authentication failed: unexpected handshake message ",
                 static_cast<int>(kind), " from ", peer);
  }
  return msg;
}

std::string proof(const Secret& secret, const char* role, const std::string& purpose,
                  const std::string& nonce_c, const std::string& nonce_s) {
  std::string data = "chorus-auth-v1";
  data.push_back('\0');
  data += role;
  data.push_back('\0');
  byte_order::put_u32(data, static_cast<uint32_t>(purpose.size()));
  data += purpose;
  data += nonce_c;
  data += nonce_s;
  return hmac_sha256(secret.bytes(), data);
}

// Tells the client why it is being dropped. Best effort: never blocks, errors ignored,
// since the connection is being closed anyway.
void send_reject(int fd) {
  std::string bytes = encode(Kind::kReject, "");
  [[maybe_unused]] ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

void authenticate_client(int fd, const Secret& secret, const std::string& purpose,
                         Deadline deadline) {
  CHORUS_CHECK_ARG(!secret.empty(), "authentication needs a job secret (CHORUS_SECRET)");
  const std::string nonce_c = random_bytes(kNonceBytes);
  send_message(fd, Kind::kHello, nonce_c, deadline);
  Message challenge = recv_message(fd, Kind::kChallenge, deadline);
  if (challenge.kind == Kind::kReject) {
    CHORUS_THROW(AuthError, "authentication failed: ", net::peer_name(fd), " refused the ", purpose,
                 " handshake");
  }
  const std::string& nonce_s = challenge.body;
  send_message(fd, Kind::kProof, proof(secret, "client", purpose, nonce_c, nonce_s), deadline);
  Message verdict = recv_message(fd, Kind::kAccept, deadline);
  if (verdict.kind == Kind::kReject) {
    CHORUS_THROW(AuthError, "authentication failed (wrong secret?): ", net::peer_name(fd),
                 " rejected this process's ", purpose, " handshake");
  }
  if (!constant_time_equal(verdict.body, proof(secret, "server", purpose, nonce_c, nonce_s))) {
    CHORUS_THROW(AuthError, "authentication failed (wrong secret?): ", net::peer_name(fd),
                 " could not prove it knows the job secret (", purpose, ")");
  }
}

void authenticate_server(int fd, const Secret& secret, const std::string& purpose,
                         Deadline deadline) {
  CHORUS_CHECK_ARG(!secret.empty(), "authentication needs a job secret (CHORUS_SECRET)");
  try {
    Message hello = recv_message(fd, Kind::kHello, deadline);
    if (hello.kind != Kind::kHello) {
      CHORUS_THROW(AuthError, "authentication failed: ", net::peer_name(fd),
                   " sent a REJECT instead of a HELLO");
    }
    const std::string nonce_s = random_bytes(kNonceBytes);
    send_message(fd, Kind::kChallenge, nonce_s, deadline);
    Message client_proof = recv_message(fd, Kind::kProof, deadline);
    if (client_proof.kind != Kind::kProof ||
        !constant_time_equal(client_proof.body,
                             proof(secret, "client", purpose, hello.body, nonce_s))) {
      CHORUS_THROW(AuthError, "authentication failed: ", net::peer_name(fd),
                   " sent a wrong proof for the ", purpose,
                   " handshake (wrong secret or replayed handshake)");
    }
    send_message(fd, Kind::kAccept, proof(secret, "server", purpose, hello.body, nonce_s),
                 deadline);
  } catch (const AuthError&) {
    send_reject(fd);
    throw;
  }
}

}  // namespace chorus::rendezvous
