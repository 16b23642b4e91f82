// A Mesh is one Link from this rank to every other rank of a group, plus where each rank
// lives (which ranks share a host). It is built collectively through a Store: each rank
// publishes its host identity and listening address, then links are made — shared memory
// between ranks on the same host, TCP otherwise (CHORUS_TRANSPORT overrides).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/store.h"
#include "transport/link.h"
#include "util/net.h"

namespace chorus::transport {

enum class TransportKind { kAuto, kTcp, kShm };

// "auto" | "tcp" | "shm"; InvalidArgument otherwise.
TransportKind parse_transport_kind(const std::string& name);

// The default ring size: 4 MiB, halved while this rank's rings (two per peer on the host)
// would exceed 64 MiB, down to 256 KiB. The segments are populated when mapped, so this
// bounds the memory a host's ranks commit at start. Bigger rings were slower: a 16 MiB ring
// cycles a collective's data through more memory than the caches hold (docs/benchmarks.md).
size_t auto_shm_ring_bytes(int local_size);

// The socket settings of peer TCP links for a MeshOptions::tcp_congestion value:
//   "auto"    cubic, else reno, else the system default, silently;
//   "system"  the system default (net.ipv4.tcp_congestion_control);
//   "a,b"     the first of these the kernel accepts; none is an InvalidArgument when the
//             mesh is built, listing what the kernel offers.
// InvalidArgument here for a malformed value (names are [a-z0-9_], at most 15 characters).
net::SocketTuning peer_socket_tuning(const std::string& tcp_congestion, int buffer_bytes);

struct MeshOptions {
  TransportKind kind = TransportKind::kAuto;
  // Address to listen on for peer connections and to publish. Empty: the local address of
  // the connection to the store (the interface that reaches it), loopback for local jobs.
  std::string bind_address;
  // Identity of this host: ranks with equal ids may use shared memory and count as
  // "local". Empty: hostname + boot id + network namespace (so network namespaces used
  // as test hosts count as different hosts).
  std::string host_id;
  std::chrono::milliseconds timeout{60000};
  Secret secret;  // authenticates every peer connection
  // Host of the rendezvous store, used to pick the default bind address (the interface
  // that reaches it) when ranks are on several hosts. Empty: first interface that is up.
  std::string store_host;
  // Bytes per direction of each shared-memory ring (a power of two, 4 KiB .. 1 GiB);
  // 0: auto_shm_ring_bytes(ranks on this host).
  size_t shm_ring_bytes = 0;
  // SO_SNDBUF/SO_RCVBUF of peer TCP sockets (the kernel caps it at net.core.[rw]mem_max).
  int tcp_buffer_bytes = 4 << 20;
  // Congestion control of peer TCP sockets (see peer_socket_tuning): "auto" avoids a
  // pacing default such as BBR, whose per-segment pacing timers cost half the throughput of
  // a loopback or LAN link on a busy CPU (docs/benchmarks.md).
  std::string tcp_congestion = "auto";

  // Options from CHORUS_TRANSPORT, CHORUS_BIND_ADDRESS, CHORUS_HOST_ID,
  // CHORUS_TIMEOUT_SECONDS, CHORUS_SHM_RING_BYTES, CHORUS_TCP_CONGESTION; store_host from
  // the job's store address (CHORUS_STORE_ADDR, MASTER_ADDR, ...: rendezvous/job_env.h).
  // The secret is not read here.
  static MeshOptions from_env();
};

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;             // index among the ranks on this host, ordered by rank
  int local_size = 1;             // ranks on this host
  int cross_rank = 0;             // index of this host among hosts, ordered by their lowest rank
  int cross_size = 1;             // number of hosts
  std::vector<int> host_of_rank;  // host index (as cross_rank) of every rank
};

class Mesh {
 public:
  virtual ~Mesh() = default;
  const Topology& topology() const { return topology_; }
  int rank() const { return topology_.rank; }
  int size() const { return topology_.size; }
  // The link to `peer`. REQUIRES: peer != rank() and 0 <= peer < size().
  Link& link(int peer) { return *links_[peer]; }
  // Aborts every link (see Link::abort), telling peers `reason` where a link can, then
  // leaves it in the abort notes, if any, for the peers whose links cannot.
  void abort(std::string_view reason) noexcept;
  // Hands `notes` to the links that cannot carry a reason (TCP); kept only if one takes it.
  void set_abort_notes(std::shared_ptr<AbortNotes> notes);

 protected:
  Topology topology_;
  std::vector<std::unique_ptr<Link>> links_;  // links_[rank()] is null

 private:
  std::shared_ptr<AbortNotes> abort_notes_;
};

// Collective over `size` ranks sharing `store` (use a PrefixStore per group/attempt).
// Throws TimeoutError naming the missing ranks when some do not arrive within
// options.timeout, AuthError when a peer fails authentication.
std::unique_ptr<Mesh> connect_mesh(Store& store, int rank, int size, const MeshOptions& options);

}  // namespace chorus::transport
