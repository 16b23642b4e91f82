// The communicator: a group of ranks and the collectives on raw buffers among them.
//
// Counts are numbers of elements (64-bit: more than 2^31 elements work); zero is valid.
// Every collective must be called by every rank of the communicator in the same order with
// matching arguments (the engine layer checks that; this layer trusts it). Passing the
// same pointer as input and output runs in place.
//
// Errors: IoError when a peer is gone, TimeoutError when a peer stops answering for
// `timeout`; after either, the communicator is broken (every later call throws IoError)
// and this rank's links are closed so that the other ranks fail within seconds too. Their
// errors then carry this rank's own (in shared memory, and through the store over TCP), so
// that every rank names the first failure.
// InvalidArgument for bad arguments (nothing was sent).
//
// Thread safety: one thread at a time may call a Communicator's collectives.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/dtype.h"
#include "chorus/shared_buffer.h"
#include "chorus/store.h"

namespace chorus {

namespace transport {
class Mesh;
}

enum class AllreduceAlgorithm {
  kAuto,               // chosen by message size and world size (measured crossovers)
  kRing,               // reduce-scatter + allgather, chunked and pipelined
  kHalvingDoubling,    // Rabenseifner: recursive halving reduce-scatter + doubling allgather
  kRecursiveDoubling,  // lg p exchanges of the whole buffer: latency-optimal, tiny messages
};

// "auto" | "ring" | "halving_doubling" | "recursive_doubling"; InvalidArgument otherwise.
AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name);
const char* allreduce_algorithm_name(AllreduceAlgorithm algo);

struct CommunicatorOptions {
  // CHORUS_TRANSPORT: auto | tcp | shm, chorus's own links (auto: shared memory within a
  // host, TCP across), or mpi: every collective runs through MPI on a communicator of its
  // own (a job started by mpirun; docs/launcher.md, "The MPI data path"). Job picks mpi
  // for auto when mpirun started the job across hosts.
  std::string transport = "auto";
  std::string bind_address;   // CHORUS_BIND_ADDRESS; empty: see MeshOptions
  std::string host_id;        // CHORUS_HOST_ID; empty: detected
  std::string store_host;     // the store's host: the default bind address is the
                              // interface that reaches it (Job sets it)
  size_t shm_ring_bytes = 0;  // CHORUS_SHM_RING_BYTES, per direction; 0: by ranks per host
  // CHORUS_TCP_CONGESTION: "auto" (cubic, else reno, else the system's), "system", or
  // algorithm names to try in order ("reno,cubic"), one of which the kernel must accept.
  std::string tcp_congestion = "auto";
  // CHORUS_SHM_SINGLE_COPY (1|0): when every rank is on one host, collectives of 1 MiB and
  // more copy straight between the ranks' buffers (process_vm_readv / process_vm_writev:
  // the direct allreduce, the single-copy ring) instead of through the shared-memory
  // rings, if every rank may read its peers' memory (probed once; otherwise, silently, the
  // rings). Must be the same on every rank.
  bool shm_single_copy = true;
  // CHORUS_SHM_STREAMING_BYTES: when every rank is on one host (shared memory), allreduces
  // of at least this many bytes run the ring through the shared-memory rings a small unit
  // at a time and write results with streaming stores, past the cache (docs/algorithms.md),
  // when out of place (in place, the direct allreduce is faster where ranks may read each
  // other); 0: never. Must be the same on every rank.
  size_t shm_streaming_bytes = size_t{16} << 20;
  // CHORUS_SHM_PLACEMENT (auto | near | far): where ranks on one host would stream, and
  // their cores are far apart (caches that hand lines across slowly, as a VM's vCPUs may be
  // placed, docs/algorithms.md), the streaming ring hands its bytes on through memory
  // instead. -1 (auto): for 2 ranks, rank 0 runs the mode that was faster in its recent
  // such calls (each mode twice first, the other again now and then) and tells rank 1 at
  // each call; more ranks count as near. 0: near; 1: far, for any number of ranks. Must be
  // the same on every rank.
  int shm_placement = -1;
  std::chrono::milliseconds timeout{60000};  // CHORUS_TIMEOUT_SECONDS
  // CHORUS_LOG_PLANS=1: every allreduce, allgather and reduce-scatter logs its plan (how it
  // runs, and the rule that chose it) at info level. For finding out, not for production.
  bool log_plans = false;
  AllreduceAlgorithm allreduce_algorithm = AllreduceAlgorithm::kAuto;  // CHORUS_ALLREDUCE_ALGO
  // CHORUS_HIERARCHICAL_ALLREDUCE (auto | 1 | 0): where ranks sit on several hosts with as
  // many on each, allreduces reduce within each host, then across hosts (each local rank
  // its slice), then share within each host (docs/algorithms.md). -1 (auto): from 1 MiB
  // unless CHORUS_ALLREDUCE_ALGO names another algorithm; 1: always; 0: never. Must be the
  // same on every rank.
  int hierarchical_allreduce = -1;
  Secret secret;  // authenticates peer connections; from_env() reads CHORUS_SECRET[_FILE]

  // Defaults overridden by the CHORUS_ variables named above.
  static CommunicatorOptions from_env();
};

// A buffer of a multi-buffer allreduce.
struct BufferPart {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements
};

class Communicator {
 public:
  // Collective over `size` ranks that share `store`: connects this rank to every other.
  // Throws TimeoutError naming missing ranks, AuthError on a wrong secret. `store` must
  // outlive the communicator (split() and the abort reasons of TCP links use it).
  static std::unique_ptr<Communicator> create(Store& store, int rank, int size,
                                              const CommunicatorOptions& options);
  ~Communicator();

  int rank() const;
  int size() const;
  int local_rank() const;  // among ranks on this host
  int local_size() const;
  int cross_rank() const;  // index of this host
  int cross_size() const;  // number of hosts

  // recv[i] = op over ranks of send[i], on every rank. ReduceOp::kAdasum combines the
  // buffers as whole vectors instead (dtype.h): floating types and a power-of-two size()
  // only, InvalidArgument otherwise; every rank gets the same bits.
  void allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op);
  // One allreduce over several buffers, as over their concatenation: a single collective
  // (with kAdasum, each buffer is combined as a vector of its own, all in one collective).
  // Where the plan reads peers' memory (allreduce_reads_parts_in_place()) the parts are
  // read and written where they lie; otherwise they are staged through one buffer. Every
  // rank passes the same counts in the same order; a part may be in place (send == recv).
  void allreduce(const std::vector<BufferPart>& parts, DataType type, ReduceOp op);
  // Whether allreduce(parts) of 1 MiB or more reads and writes the parts where they lie,
  // with no staging copy, so that a caller gains by handing it larger groups (the engine's
  // fusion). The same on every rank. Collective the first time (every rank must ask at the
  // same point, as the engine does while it groups an agreed plan), then cached.
  bool allreduce_reads_parts_in_place();
  // recv = concatenation over ranks r of r's `counts[r]` elements. counts.size() == size().
  void allgatherv(const void* send, void* recv, const std::vector<size_t>& counts, DataType type);
  // Every rank contributes `count` elements.
  void allgather(const void* send, void* recv, size_t count, DataType type);
  // buffer on every rank becomes root's buffer.
  void broadcast(void* buffer, size_t count, DataType type, int root);
  // Reduces send (sum of recv_counts elements, the same on every rank) and leaves block r
  // (recv_counts[r] elements, at offset sum(recv_counts[0..r))) on rank r, in recv.
  void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                      DataType type, ReduceOp op);
  // Block j of send (send_counts[j] elements) goes to rank j; block i of recv comes from
  // rank i (recv_counts[i] elements). Must agree: my send_counts[j] == j's recv_counts[me].
  void alltoallv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                 const std::vector<size_t>& recv_counts, DataType type);
  // alltoallv with count elements to and from every rank.
  void alltoall(const void* send, void* recv, size_t count_per_rank, DataType type);
  // Returns once every rank has entered.
  void barrier();

  // A new communicator among `ranks` (ranks of this one, ascending, distinct, including this
  // rank), with links of its own: its rank i is ranks[i]. Collective over those ranks only,
  // which must pass the same `ranks` and `scope`; a scope names one split of this
  // communicator (a second split with the same scope on the same store is undefined).
  // Connects through the store this communicator was created with, under the keys
  // "split/<scope>/", so the new communicator may split again. Uses neither this
  // communicator's links nor its scratch memory: any thread may call it, also while another
  // thread runs this communicator's collectives (how the engine builds process sets).
  // REQUIRES: created by create(), and that store still alive (InvalidArgument when the
  // communicator was made another way). Throws what create() throws.
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& scope) const;

  // Collective: every rank asks for the same number of bytes (> 0; InvalidArgument on every
  // rank otherwise). Returns memory that every other rank maps too when all ranks are on
  // this host and may open each other's memory (SharedBuffer::shared()), else this rank's
  // own memory. Once any shared memory exists, every allreduce of 4 KiB or more first
  // compares the ranks' calls through it (about half a microsecond): when every rank's send
  // and recv lie in shared memory the allreduce runs there (docs/algorithms.md), otherwise
  // the usual way; a count, type or op that differs between ranks is then an
  // InvalidArgument on every rank. `pages`: SharedBuffer's SharedPages, the same on every
  // rank.
  SharedBuffer alloc_shared(size_t bytes, SharedPages pages = SharedPages::kPopulated);

  // Breaks the communicator (see above), telling the other ranks `reason` (this rank's
  // error; empty: none). May be called from any thread.
  void abort(std::string_view reason = {}) noexcept;
  bool broken() const;

  const CommunicatorOptions& options() const;
  // Whether ring collectives of 1 MiB and more read peers' memory directly
  // (CommunicatorOptions::shm_single_copy): decided by every rank together at the first
  // such call; false before it.
  bool single_copy() const;
  // How many allreduces have run in shared memory (alloc_shared) so far.
  uint64_t shared_memory_allreduces() const;
  // Whether [p, p + bytes) lies in memory alloc_shared returned that the other ranks map
  // (this rank's view only; an allreduce still checks every rank's). Any thread, any time,
  // also while collectives run: the engine asks it when an op is enqueued.
  bool in_shared_memory(const void* p, size_t bytes) const;
  // The plan the last allreduce, allgather or reduce-scatter ran: "shared memory", "direct
  // (single-copy)", "ring (streaming)", "ring (single-copy)", "ring", "halving-doubling",
  // "recursive doubling" (docs/algorithms.md); "" before any. For the thread that runs the
  // collectives.
  const char* last_plan() const;

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
