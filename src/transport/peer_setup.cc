#include "transport/peer_setup.h"

#include <poll.h>

#include <algorithm>
#include <sstream>

#include "chorus/error.h"
#include "rendezvous/auth.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/unix_socket.h"
#include "transport/tcp/tcp_link.h"
#include "transport/topology.h"
#include "util/log.h"

namespace chorus::transport {
namespace {

constexpr auto kHandshakeTimeout = std::chrono::milliseconds(5000);
constexpr int kMaxPollSliceMs = 100;

// One connection's handshake may not hold up the others for long, nor outlive the mesh's.
Deadline handshake_deadline(const Deadline& overall) {
  return Deadline::after(std::min<std::chrono::milliseconds>(
      kHandshakeTimeout, std::chrono::milliseconds(overall.remaining_ms())));
}

Hello make_hello(const SetupContext& ctx, int peer, LinkKind kind) {
  Hello h;
  h.kind = kind;
  h.from_rank = static_cast<uint32_t>(ctx.rank);
  h.to_rank = static_cast<uint32_t>(peer);
  h.size = static_cast<uint32_t>(ctx.size);
  h.ring_bytes = kind == LinkKind::kShm ? ctx.shm_ring_bytes : 0;
  h.group = ctx.group;
  h.token = ctx.peers[ctx.rank].token;
  return h;
}

void expect_accepted(int fd, Deadline deadline, int peer) {
  uint8_t reply[kReplyBytes];
  net::recv_all(fd, reply, sizeof(reply), deadline, "waiting for the peer's answer");
  HelloStatus status;
  if (!decode_reply(reply, status)) {
    CHORUS_THROW(AuthError, "rank ", peer, " answered with garbage");
  }
  if (status != HelloStatus::kAccepted) {
    CHORUS_THROW(AuthError, "rank ", peer, " rejected the connection: ", hello_status_text(status));
  }
}

std::unique_ptr<Link> connect_tcp_peer(const SetupContext& ctx, int peer) {
  const std::string& address = ctx.peers[peer].tcp_address;
  net::Fd fd = net::connect_tcp(net::Endpoint::parse(address), ctx.deadline, ctx.tcp_tuning);
  rendezvous::authenticate_client(fd.get(), ctx.options->secret, "peer", ctx.deadline);
  uint8_t hello[Hello::kWireBytes];
  make_hello(ctx, peer, LinkKind::kTcp).encode(hello);
  net::send_all(fd.get(), hello, sizeof(hello), ctx.deadline, "sending hello");
  expect_accepted(fd.get(), ctx.deadline, peer);
  return std::make_unique<TcpLink>(peer, std::move(fd), address);
}

std::unique_ptr<Link> connect_shm_peer(const SetupContext& ctx, int peer) {
  net::Fd sock = unix_socket::connect_abstract(ctx.peers[peer].shm_name, ctx.deadline);
  rendezvous::authenticate_client(sock.get(), ctx.options->secret, "shm", ctx.deadline);
  net::Fd memfd;
  shm::Segment segment = shm::Segment::create(ctx.shm_ring_bytes, memfd);
  uint8_t hello[Hello::kWireBytes];
  make_hello(ctx, peer, LinkKind::kShm).encode(hello);
  unix_socket::send_with_fd(sock.get(), hello, sizeof(hello), memfd.get(), ctx.deadline,
                            "sending hello");
  expect_accepted(sock.get(), ctx.deadline, peer);
  // memfd closes here: the two mappings keep the memory, and nothing names it any more.
  return std::make_unique<ShmLink>(ctx.rank, peer, 0, std::move(segment), std::move(sock));
}

}  // namespace

std::unique_ptr<Link> connect_peer(const SetupContext& ctx, int peer) {
  LinkKind kind = ctx.kinds[peer];
  try {
    if (kind == LinkKind::kShm) return connect_shm_peer(ctx, peer);
    return connect_tcp_peer(ctx, peer);
  } catch (const Error&) {
    std::ostringstream where;
    where << "rank " << ctx.rank << ": connecting to rank " << peer << " over "
          << link_kind_name(kind) << " ("
          << (kind == LinkKind::kShm ? "same host" : ctx.peers[peer].tcp_address) << "): ";
    rethrow_with_context(where.str());
  }
}

PeerAcceptor::PeerAcceptor(const SetupContext& ctx, bool tcp, const std::string& bind_address,
                           bool shm)
    : ctx_(ctx), expected_(ctx.size, false) {
  for (int r = 0; r < ctx.rank; ++r) expected_[r] = ctx.kinds[r] != LinkKind::kNone;
  if (tcp) {
    // Accepted sockets inherit the tuning, before their window scale is negotiated.
    tcp_listener_ = net::listen_tcp(bind_address, 0, 512, ctx.tcp_tuning);
    // A wildcard bind is published as the address that reaches the store (or an interface).
    bool wildcard = bind_address == "0.0.0.0" || bind_address == "::";
    std::string host = wildcard ? detect_local_address(ctx.options->store_host) : bind_address;
    tcp_address_ = net::Endpoint{host, net::local_port(tcp_listener_.get())}.to_string();
  }
  if (shm) shm_listener_ = unix_socket::listen_abstract(shm_name_);
}

void PeerAcceptor::accept_all(std::vector<std::unique_ptr<Link>>& links) {
  while (std::find(expected_.begin(), expected_.end(), true) != expected_.end()) {
    if (ctx_.deadline.expired()) throw_missing();
    pollfd fds[2];
    LinkKind kinds[2];
    nfds_t n = 0;
    if (tcp_listener_.valid())
      kinds[n] = LinkKind::kTcp, fds[n++] = {tcp_listener_.get(), POLLIN, 0};
    if (shm_listener_.valid())
      kinds[n] = LinkKind::kShm, fds[n++] = {shm_listener_.get(), POLLIN, 0};
    int rc = ::poll(fds, n, std::min(ctx_.deadline.remaining_ms(), kMaxPollSliceMs));
    if (rc <= 0) continue;  // timeout slice or EINTR: re-check the deadline
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      net::Fd fd = unix_socket::try_accept(fds[i].fd);  // any listening socket
      if (fd.valid()) handle(std::move(fd), kinds[i], links);
    }
  }
}

bool PeerAcceptor::handle(net::Fd fd, LinkKind kind, std::vector<std::unique_ptr<Link>>& links) {
  std::string from = kind == LinkKind::kTcp ? net::peer_name(fd.get()) : "a local process";
  try {
    std::unique_ptr<Link> link = handshake(std::move(fd), kind, handshake_deadline(ctx_.deadline));
    if (!link) return false;
    int peer = link->peer();
    expected_[peer] = false;
    links[peer] = std::move(link);
    return true;
  } catch (const AuthError& e) {
    ++auth_failures_;
    last_auth_failure_ = e.what();
    CHORUS_LOG(kWarning, "transport")
        << "rank " << ctx_.rank << ": dropped " << link_kind_name(kind) << " connection from "
        << from << ": " << e.what();
  } catch (const Error& e) {  // IoError / TimeoutError: a stray or dying connection
    CHORUS_LOG(kWarning, "transport")
        << "rank " << ctx_.rank << ": dropped " << link_kind_name(kind) << " connection from "
        << from << ": " << e.what();
  }
  return false;
}

std::unique_ptr<Link> PeerAcceptor::handshake(net::Fd fd, LinkKind kind, Deadline deadline) {
  if (kind == LinkKind::kTcp) net::set_nodelay(fd.get());
  rendezvous::authenticate_server(fd.get(), ctx_.options->secret,
                                  kind == LinkKind::kTcp ? "peer" : "shm", deadline);
  uint8_t wire[Hello::kWireBytes];
  net::Fd memfd;
  if (kind == LinkKind::kShm) {
    memfd = unix_socket::recv_with_fd(fd.get(), wire, sizeof(wire), deadline, "receiving hello");
  } else {
    net::recv_all(fd.get(), wire, sizeof(wire), deadline, "receiving hello");
  }
  Hello hello;
  if (!hello.decode(wire)) CHORUS_THROW(AuthError, "bad hello (magic or version)");
  HelloStatus status = check(hello, kind);
  if (status == HelloStatus::kAccepted && kind == LinkKind::kShm && !memfd.valid()) {
    status = HelloStatus::kWrongIdentity;
  }
  uint8_t reply[kReplyBytes];
  int peer = static_cast<int>(hello.from_rank);
  if (status != HelloStatus::kAccepted) {
    encode_reply(status, reply);
    net::send_all(fd.get(), reply, sizeof(reply), deadline, "rejecting hello");
    CHORUS_THROW(AuthError, "rejected hello claiming rank ", hello.from_rank, ": ",
                 hello_status_text(status));
  }
  if (kind == LinkKind::kShm) {
    shm::Segment segment = shm::Segment::map_existing(memfd.get(), hello.ring_bytes);
    encode_reply(status, reply);
    net::send_all(fd.get(), reply, sizeof(reply), deadline, "accepting hello");
    return std::make_unique<ShmLink>(ctx_.rank, peer, 1, std::move(segment), std::move(fd));
  }
  encode_reply(status, reply);
  net::send_all(fd.get(), reply, sizeof(reply), deadline, "accepting hello");
  std::string label = net::peer_name(fd.get());
  return std::make_unique<TcpLink>(peer, std::move(fd), label);
}

HelloStatus PeerAcceptor::check(const Hello& hello, LinkKind kind) const {
  if (hello.group != ctx_.group) return HelloStatus::kWrongGroup;
  if (hello.to_rank != static_cast<uint32_t>(ctx_.rank) ||
      hello.size != static_cast<uint32_t>(ctx_.size) || hello.from_rank >= hello.to_rank) {
    return HelloStatus::kWrongIdentity;
  }
  int from = static_cast<int>(hello.from_rank);
  if (hello.token != ctx_.peers[from].token) return HelloStatus::kWrongIdentity;
  if (hello.kind != kind || ctx_.kinds[from] != kind || !expected_[from]) {
    return HelloStatus::kUnexpected;
  }
  if (kind == LinkKind::kShm && hello.ring_bytes != ctx_.shm_ring_bytes) {
    return HelloStatus::kWrongRingSize;
  }
  return HelloStatus::kAccepted;
}

void PeerAcceptor::throw_missing() const {
  std::ostringstream missing;
  const char* sep = "";
  for (int r = 0; r < ctx_.size; ++r) {
    if (expected_[r]) missing << sep << r, sep = ", ";
  }
  std::ostringstream msg;
  msg << "rank " << ctx_.rank << ": ranks [" << missing.str()
      << "] did not connect within the mesh timeout";
  if (auth_failures_ > 0) {
    CHORUS_THROW(AuthError, msg.str(), "; ", auth_failures_,
                 " connection(s) failed authentication meanwhile, the last: ", last_auth_failure_);
  }
  CHORUS_THROW(TimeoutError, msg.str());
}

}  // namespace chorus::transport
