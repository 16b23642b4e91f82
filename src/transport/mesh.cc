#include "transport/mesh.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "chorus/error.h"
#include "rendezvous/job_env.h"
#include "transport/peer_setup.h"
#include "transport/topology.h"
#include "util/env.h"

namespace chorus::transport {
namespace {

// Store keys (relative to the caller's store, which is per group/attempt):
//   transport/host/<rank>  "host=<hex host id>\ntoken=<32 hex>\n"
//   transport/addr/<rank>  "tcp=<host:port or empty>\nshm=<abstract socket name or empty>\n"
std::string host_key(int rank) { return "transport/host/" + std::to_string(rank); }
std::string addr_key(int rank) { return "transport/addr/" + std::to_string(rank); }

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) s += digits[b >> 4], s += digits[b & 15];
  return s;
}

std::map<std::string, std::string> parse_fields(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) fields[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return fields;
}

class BuiltMesh : public Mesh {
 public:
  BuiltMesh(Topology topology, std::vector<std::unique_ptr<Link>> links) {
    topology_ = std::move(topology);
    links_ = std::move(links);
  }
};

// Waits until every rank in `ranks` has set key_of(rank); returns the values by rank.
template <typename KeyOf>
std::vector<std::string> gather(Store& store, const std::vector<int>& ranks, KeyOf key_of,
                                const SetupContext& ctx, const char* what) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(key_of(r));
  try {
    store.wait(keys, std::chrono::milliseconds(ctx.deadline.remaining_ms()));
  } catch (const TimeoutError&) {
    std::ostringstream missing;
    const char* sep = "";
    for (int r : ranks) {
      if (!store.check({key_of(r)})) missing << sep << r, sep = ", ";
    }
    CHORUS_THROW(TimeoutError, "rank ", ctx.rank, ": ranks [", missing.str(), "] did not ", what,
                 " within ", ctx.options->timeout.count(), " ms");
  }
  std::vector<std::string> values;
  for (const auto& key : keys) {
    values.push_back(store.get(key, std::chrono::milliseconds(ctx.deadline.remaining_ms())));
  }
  return values;
}

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

void exchange_hosts(Store& store, SetupContext& ctx, const std::string& host_id) {
  Token token = random_token();
  store.set(host_key(ctx.rank), "host=" + to_hex(host_id) + "\ntoken=" + token_hex(token) + "\n");
  auto values = gather(store, all_ranks(ctx.size), host_key, ctx, "join the mesh");
  ctx.peers.resize(ctx.size);
  for (int r = 0; r < ctx.size; ++r) {
    auto fields = parse_fields(values[r]);
    ctx.peers[r].host_id = fields["host"];
    if (!parse_token_hex(fields["token"], ctx.peers[r].token) || fields["host"].empty()) {
      CHORUS_THROW(IoError, "rank ", ctx.rank, ": malformed mesh entry of rank ", r,
                   " in the store");
    }
  }
  ctx.group = ctx.peers[0].token;
}

// Link kind per peer; every rank checks every pair so that all fail alike on a bad choice.
std::vector<LinkKind> choose_kinds(TransportKind kind, const Topology& t) {
  std::vector<LinkKind> kinds(t.size, LinkKind::kNone);
  for (int a = 0; a < t.size; ++a) {
    for (int b = 0; b < t.size; ++b) {
      if (a == b) continue;
      bool same_host = t.host_of_rank[a] == t.host_of_rank[b];
      CHORUS_CHECK_ARG(kind != TransportKind::kShm || same_host, "rank ", t.rank,
                       ": transport 'shm' was forced (CHORUS_TRANSPORT=shm) but ranks ", a, " and ",
                       b, " are on different hosts; use 'auto' or 'tcp'");
      if (a != t.rank) continue;
      bool shm = kind == TransportKind::kShm || (kind == TransportKind::kAuto && same_host);
      kinds[b] = shm ? LinkKind::kShm : LinkKind::kTcp;
    }
  }
  return kinds;
}

bool accepts(const SetupContext& ctx, LinkKind kind) {
  for (int r = 0; r < ctx.rank; ++r) {
    if (ctx.kinds[r] == kind) return true;
  }
  return false;
}

std::string bind_address(const MeshOptions& options, const Topology& t) {
  if (!options.bind_address.empty()) return options.bind_address;
  if (t.cross_size == 1) return "127.0.0.1";
  return detect_local_address(options.store_host);
}

void exchange_addresses(Store& store, SetupContext& ctx, const PeerAcceptor& acceptor) {
  store.set(addr_key(ctx.rank),
            "tcp=" + acceptor.tcp_address() + "\nshm=" + acceptor.shm_name() + "\n");
  std::vector<int> higher;
  for (int r = ctx.rank + 1; r < ctx.size; ++r) higher.push_back(r);
  auto values = gather(store, higher, addr_key, ctx, "publish their addresses");
  for (size_t i = 0; i < higher.size(); ++i) {
    auto fields = parse_fields(values[i]);
    ctx.peers[higher[i]].tcp_address = fields["tcp"];
    ctx.peers[higher[i]].shm_name = fields["shm"];
  }
}

}  // namespace

TransportKind parse_transport_kind(const std::string& name) {
  if (name == "auto") return TransportKind::kAuto;
  if (name == "tcp") return TransportKind::kTcp;
  if (name == "shm") return TransportKind::kShm;
  CHORUS_THROW(InvalidArgument, "unknown transport '", name, "' (expected auto, tcp or shm)");
}

size_t auto_shm_ring_bytes(int local_size) {
  constexpr size_t kBudget = size_t{64} << 20, kMin = size_t{256} << 10, kMax = size_t{4} << 20;
  size_t rings = 2 * static_cast<size_t>(std::max(1, local_size - 1));
  size_t bytes = kMax;
  while (bytes > kMin && bytes * rings > kBudget) bytes /= 2;
  return bytes;
}

net::SocketTuning peer_socket_tuning(const std::string& tcp_congestion, int buffer_bytes) {
  net::SocketTuning t;
  t.buffer_bytes = buffer_bytes;
  if (tcp_congestion == "system") return t;
  if (tcp_congestion == "auto") {
    t.congestion = {"cubic", "reno"};
    return t;
  }
  for (size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
    end = tcp_congestion.find(',', begin);
    std::string name = tcp_congestion.substr(begin, end - begin);
    bool ok = !name.empty() && name.size() <= 15 &&
              name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
    CHORUS_CHECK_ARG(ok, "TCP congestion control '", tcp_congestion,
                     "': expected auto, system or a comma-separated list of algorithm names");
    t.congestion.push_back(name);
  }
  t.congestion_required = true;
  return t;
}

MeshOptions MeshOptions::from_env() {
  MeshOptions o;
  // "mpi" makes no mesh: the communicator runs its collectives through MPI instead.
  if (auto kind = env_string("CHORUS_TRANSPORT"); kind && *kind != "mpi") {
    o.kind = parse_transport_kind(*kind);
  }
  if (auto bind = env_string("CHORUS_BIND_ADDRESS")) o.bind_address = *bind;
  if (auto host = env_string("CHORUS_HOST_ID")) o.host_id = *host;
  o.timeout = default_timeout();
  try {
    JobEnv job = read_job_env();
    if (job.store) o.store_host = job.store->host;
  } catch (const InvalidArgument&) {
    // Only a hint for the bind address; whoever reads the job's environment reports it.
  }
  if (env_string("CHORUS_SHM_RING_BYTES")) {
    int64_t ring = env_int_or("CHORUS_SHM_RING_BYTES", 0);
    CHORUS_CHECK_ARG(ring >= 4096 && ring <= (int64_t{1} << 30) && (ring & (ring - 1)) == 0,
                     "CHORUS_SHM_RING_BYTES=", ring, " must be a power of two in [4096, 2^30]");
    o.shm_ring_bytes = static_cast<size_t>(ring);
  }
  if (auto cc = env_string("CHORUS_TCP_CONGESTION")) {
    net::check_tuning(peer_socket_tuning(*cc, 0));  // fails here, before any connection
    o.tcp_congestion = *cc;
  }
  return o;
}

void Mesh::abort(std::string_view reason) noexcept {
  for (auto& l : links_)
    if (l) l->abort(reason);
  if (abort_notes_) abort_notes_->publish(reason);
}

void Mesh::set_abort_notes(std::shared_ptr<AbortNotes> notes) {
  bool used = false;
  for (auto& l : links_)
    if (l && l->set_abort_notes(notes.get())) used = true;
  if (used) abort_notes_ = std::move(notes);
}

std::unique_ptr<Mesh> connect_mesh(Store& store, int rank, int size, const MeshOptions& options) {
  CHORUS_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "connect_mesh: rank ", rank,
                   " outside a group of size ", size);
  std::vector<std::unique_ptr<Link>> links(size);
  if (size == 1) return std::make_unique<BuiltMesh>(compute_topology(0, {""}), std::move(links));
  CHORUS_CHECK_ARG(!options.secret.empty(), "rank ", rank,
                   ": connect_mesh needs the job secret (MeshOptions::secret is empty)");
  SetupContext ctx;
  ctx.rank = rank;
  ctx.size = size;
  ctx.options = &options;
  ctx.deadline = Deadline::after(options.timeout);
  ctx.tcp_tuning = peer_socket_tuning(options.tcp_congestion, options.tcp_buffer_bytes);
  net::check_tuning(ctx.tcp_tuning);  // a refused setting fails every rank that has it, now
  exchange_hosts(store, ctx, options.host_id.empty() ? default_host_id() : options.host_id);
  std::vector<std::string> host_ids;
  for (const auto& p : ctx.peers) host_ids.push_back(p.host_id);
  Topology topology = compute_topology(rank, host_ids);
  ctx.kinds = choose_kinds(options.kind, topology);
  ctx.shm_ring_bytes = options.shm_ring_bytes > 0 ? options.shm_ring_bytes
                                                  : auto_shm_ring_bytes(topology.local_size);
  PeerAcceptor acceptor(ctx, accepts(ctx, LinkKind::kTcp), bind_address(options, topology),
                        accepts(ctx, LinkKind::kShm));
  exchange_addresses(store, ctx, acceptor);
  for (int peer = rank + 1; peer < size; ++peer) links[peer] = connect_peer(ctx, peer);
  acceptor.accept_all(links);
  return std::make_unique<BuiltMesh>(std::move(topology), std::move(links));
}

}  // namespace chorus::transport
