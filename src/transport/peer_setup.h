// Making the links of a mesh, once every rank's host and addresses are known (mesh.cc does
// the store part). For each pair exactly one connection: the lower rank connects to the
// higher one. Every connection passes the HMAC handshake (purpose "peer" for TCP, "shm" for
// the Unix socket that carries a shared-memory segment), then the connecting rank sends a
// Hello naming itself and the group; the acceptor checks it against the store's view and
// answers. A stray or mismatched connection is dropped and logged; accepting goes on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/handshake.h"
#include "transport/link.h"
#include "transport/mesh.h"
#include "util/deadline.h"
#include "util/net.h"

namespace chorus::transport {

struct PeerInfo {
  std::string host_id;
  Token token{};
  std::string tcp_address;  // "host:port", empty when the rank accepts no TCP
  std::string shm_name;     // abstract Unix socket name, empty when it accepts no shm
};

struct SetupContext {
  int rank = 0;
  int size = 0;
  const MeshOptions* options = nullptr;
  Deadline deadline = Deadline::never();
  Token group{};                 // rank 0's token: the mesh's identity
  std::vector<PeerInfo> peers;   // index = rank
  std::vector<LinkKind> kinds;   // index = rank; kNone for this rank
  net::SocketTuning tcp_tuning;  // for both ends of every TCP link
  size_t shm_ring_bytes = 0;     // of the segments this rank creates (it connects)
};

// Connects to `peer` (> ctx.rank) with the link kind ctx.kinds[peer].
std::unique_ptr<Link> connect_peer(const SetupContext& ctx, int peer);

// Listens for the lower ranks that connect to this one.
class PeerAcceptor {
 public:
  // Opens a TCP listener on `bind_address` and/or an abstract Unix socket, as needed.
  PeerAcceptor(const SetupContext& ctx, bool tcp, const std::string& bind_address, bool shm);

  std::string tcp_address() const { return tcp_address_; }
  const std::string& shm_name() const { return shm_name_; }

  // Accepts until every lower rank with a link kind has connected; stores their links.
  // TimeoutError names the ranks that never came (AuthError when some connection failed
  // authentication meanwhile: most likely that rank has another secret).
  void accept_all(std::vector<std::unique_ptr<Link>>& links);

 private:
  bool handle(net::Fd fd, LinkKind kind, std::vector<std::unique_ptr<Link>>& links);
  std::unique_ptr<Link> handshake(net::Fd fd, LinkKind kind, Deadline deadline);
  HelloStatus check(const Hello& hello, LinkKind kind) const;
  [[noreturn]] void throw_missing() const;

  const SetupContext& ctx_;
  net::Fd tcp_listener_;
  net::Fd shm_listener_;
  std::string tcp_address_;
  std::string shm_name_;
  std::vector<bool> expected_;  // index = rank: still to connect
  int auth_failures_ = 0;
  std::string last_auth_failure_;  // its message, for the timeout error
};

}  // namespace chorus::transport
