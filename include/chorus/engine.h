// The engine: asynchronous, named collectives on raw buffers, agreed across ranks.
//
// One Engine per process (per communicator). A background thread owns the communicator;
// any thread may enqueue named operations and gets a Handle back. Every cycle
// (CHORUS_CYCLE_TIME_MS, or at once when work arrives on an idle engine) the ranks agree on
// which named tensors are ready everywhere and run them in the same order on every rank,
// so ranks may submit the same tensors in different orders. What the ranks submitted
// under one name must agree (operation, dtype, shape, reduce op, root, scale factors; for
// allgather and alltoall, the dimensions after the first); otherwise every rank's handle
// for that name fails with InvalidArgument naming the tensor, the ranks and what differs.
//
// Small compatible allreduces are packed into a fusion buffer and reduced with one
// collective (CHORUS_FUSION_THRESHOLD); names seen before agree through a bit-vector
// (the response cache) instead of a full metadata exchange. See docs/engine.md.
//
// Errors: InvalidArgument (the caller's bug: bad arguments, mismatches across ranks, a
// second in-flight op with the same name), IoError (a peer is gone, or the engine was shut
// down), TimeoutError (a peer stopped answering, or the stall inspector gave up). After an
// IoError or TimeoutError from the communicator the engine is stopped: every pending handle
// fails with that error and later enqueues fail at once with it.
//
// Process sets (Horovod's): add_process_set() gives a subset of the ranks an Engine of its
// own, on a communicator of its own, so ops on different sets (disjoint or overlapping) and
// on the whole group run concurrently; none waits for another's ranks.
//
// Thread safety: every method may be called from any thread, except that start() and the
// destructor must not race with other calls on the same Engine, and process sets are added
// and removed by one thread at a time. Handles may be shared and waited on from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/dtype.h"

namespace chorus {

enum class OpType : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReduceScatter,
  kBarrier,
  kAllocShared,
};

// "allreduce", "allgather", "broadcast", "alltoall", "reduce_scatter", "barrier",
// "alloc_shared".
const char* op_type_name(OpType op);

// What the ops mean while some ranks have joined (Engine::join).
enum class JoinMode : uint8_t {
  // Joined ranks take part in every op: zeros (allreduce, reduce_scatter), no rows
  // (allgather), receiving only (broadcast, barrier); an average divides by the ranks that
  // submitted the op. alltoall, and a broadcast whose root joined, fail.
  kContribute,
  // Horovod's: joined ranks take part in allreduce (zeros) and barrier only, and an average
  // divides by every rank; allgather, broadcast, alltoall and reduce_scatter fail with
  // InvalidArgument on every rank that submitted them.
  kHorovod,
};

struct EngineOptions {
  // CHORUS_CYCLE_TIME_MS (default 1): the pause before the next negotiation when ops wait
  // here for other ranks and the last negotiation moved nothing. An idle engine negotiates
  // as soon as work arrives (else every 20 ms); after a negotiation that moved something
  // the next one starts at once. Tensors that arrive meanwhile are fused together.
  std::chrono::microseconds cycle_time{1000};
  // CHORUS_FUSION_THRESHOLD (bytes, default 4 MiB; 0 disables fusion): the most bytes one
  // fused collective carries; allreduces of 128 KiB or more (or of a quarter of it, if
  // smaller) run in place, unfused, where copying them would cost more than it saves.
  // The fusion buffer grows to what is used, never beyond this. Why 4 MiB and not Horovod's
  // 128 MB: on CPUs the copies in and out of the buffer cost two memory passes, and
  // collectives on cache-sized buffers run faster than on huge ones (docs/engine.md).
  // Where the communicator reads parts in place (Communicator::
  // allreduce_reads_parts_in_place) groups need no buffer and may reach max(threshold,
  // 128 MiB), every tensor size included.
  size_t fusion_threshold = size_t{4} << 20;
  // CHORUS_CACHE_CAPACITY (default 1024; 0 disables): names the response cache remembers.
  int cache_capacity = 1024;
  // CHORUS_STALL_CHECK_SECONDS (default 60; 0 disables): after this long with a tensor
  // submitted by some ranks only, rank 0 logs a warning naming it and the missing ranks.
  std::chrono::milliseconds stall_check{60000};
  // CHORUS_STALL_SHUTDOWN_SECONDS (default 0 = never): after this long, the engine stops on
  // every rank and every pending handle fails with TimeoutError naming the stalled tensors.
  std::chrono::milliseconds stall_shutdown{0};
  // CHORUS_TIMELINE: when set, rank 0 writes a Chrome-trace timeline to this path.
  std::string timeline_path;
  // Not from the environment: the Python layer (chorus.torch) chooses Horovod's.
  JoinMode join_mode = JoinMode::kContribute;

  // Defaults overridden by the CHORUS_ variables named above; InvalidArgument on bad values.
  static EngineOptions from_env();
};

// Counters for tests and monitoring; read with Engine::stats().
struct EngineStats {
  uint64_t cycles = 0;               // negotiation rounds (one int32 allreduce each)
  uint64_t full_negotiations = 0;    // rounds that also exchanged full metadata
  uint64_t cache_hits = 0;           // local ops agreed through the response cache
  uint64_t cache_invalidations = 0;  // cache entries dropped (metadata changed, eviction, stall)
  uint64_t collectives = 0;          // data collectives run (a fused batch counts once)
  uint64_t fused_tensors = 0;        // tensors reduced in a group of several
  uint64_t fused_in_place = 0;       // of those, handed to the communicator where they lie
                                     // (single copy; it packs groups under 1 MiB itself)
  uint64_t stall_warnings = 0;       // warnings logged by the stall inspector
  uint64_t shared_memory = 0;        // allreduces run in alloc_shared memory (communicator's)
  uint64_t ops = 0;                  // ops completed on this rank (successfully or not)
  uint64_t op_bytes = 0;             // bytes of those ops' tensors on this rank (its input)
};

struct HandleState;
class Engine;

// The future of one enqueued operation. Cheap to copy; all copies refer to the same op.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // Whether the op finished (successfully or not). Never blocks; when it has not, yields
  // the caller's core once, so that a loop of polls lets the engine thread run.
  bool poll() const;
  // Waits up to `timeout` for the op. Throws the op's error if it failed, TimeoutError
  // (the op stays pending) if it is not done in time.
  void wait(std::chrono::milliseconds timeout) const;
  // wait() with CHORUS_TIMEOUT_SECONDS.
  void wait() const;
  // Waits up to `timeout` and says whether the op finished (successfully or not); never
  // throws the op's error (wait() does). For callers that wait in slices, e.g. to notice
  // a signal between them.
  bool wait_for(std::chrono::milliseconds timeout) const;

  // Results. REQUIRES: the op finished successfully (wait() returned).
  // The output: the caller's output buffer for allreduce / broadcast, an engine-owned buffer
  // (valid while any copy of this handle lives) for allgather, alltoall and reduce_scatter.
  const void* data() const;
  size_t bytes() const;
  const std::vector<int64_t>& shape() const;
  // alltoall: rows received from each rank.
  const std::vector<int64_t>& received_splits() const;
  // join_async: the last rank to join.
  int last_joined_rank() const;
  // alloc_shared: the memory.
  const SharedBuffer& shared_buffer() const;

 private:
  const HandleState& done_state() const;
  std::shared_ptr<HandleState> state_;
};

class Engine {
 public:
  // Starts the background thread on `comm`, which the engine owns. Every rank of the
  // communicator must start an engine. The communicator must not be used by anyone else
  // until the engine is destroyed.
  static std::unique_ptr<Engine> start(std::unique_ptr<Communicator> comm,
                                       EngineOptions options = EngineOptions::from_env());
  // As above on a communicator the caller keeps (e.g. Job::world()); it must outlive the
  // engine and stay unused by the caller while the engine runs. After the engine is
  // destroyed on every rank the communicator may be used again (or given to a new engine).
  static std::unique_ptr<Engine> start(Communicator& comm,
                                       EngineOptions options = EngineOptions::from_env());
  // shutdown(), then waits for the background thread.
  ~Engine();
  // Stops the engine on every rank (at the next cycle every rank sees the request): pending
  // handles, here and on the other ranks, fail with IoError "engine shut down"; later
  // enqueues fail the same way. Returns once this rank's background thread has exited
  // (bounded by the communicator's timeout). Idempotent.
  void shutdown();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const;
  int size() const;

  // REQUIRES for every op: `name` non-empty and not in flight on this rank (InvalidArgument
  // otherwise); buffers hold the shape's elements, stay valid and are not written by the
  // caller until the handle finishes. Ranks with the same name must call the same op.

  // output = reduce over ranks of (input x prescale), then x postscale (kAverage: divided by
  // the number of ranks that contributed; see join()). input may equal output.
  Handle allreduce(const std::string& name, const void* input, void* output, DataType dtype,
                   std::vector<int64_t> shape, ReduceOp op = ReduceOp::kSum, double prescale = 1.0,
                   double postscale = 1.0);
  // Concatenates every rank's input along the first dimension, which may differ per rank
  // (the others must agree). REQUIRES: shape has at least one dimension.
  Handle allgather(const std::string& name, const void* input, DataType dtype,
                   std::vector<int64_t> shape);
  // buffer on every rank becomes root's buffer.
  Handle broadcast(const std::string& name, void* buffer, DataType dtype,
                   std::vector<int64_t> shape, int root);
  // Rows [sum(splits[0..j)), +splits[j]) of input go to rank j; empty splits: the first
  // dimension is divided evenly (it must be a multiple of size()). The output concatenates
  // what each rank sent here; received_splits() says how many rows came from each.
  Handle alltoall(const std::string& name, const void* input, DataType dtype,
                  std::vector<int64_t> shape, std::vector<int64_t> splits = {});
  // Reduces input over ranks and leaves block r of the first dimension on rank r (the first
  // `shape[0] % size()` ranks get one more row). Scale factors as for allreduce.
  Handle reduce_scatter(const std::string& name, const void* input, DataType dtype,
                        std::vector<int64_t> shape, ReduceOp op = ReduceOp::kSum,
                        double prescale = 1.0, double postscale = 1.0);
  // Finishes once every rank has entered a barrier of this name.
  Handle barrier(const std::string& name = "barrier");
  // Communicator::alloc_shared(bytes) run by the engine (every rank, the same bytes > 0):
  // handle.shared_buffer() is memory every rank maps when they share a host, else this
  // rank's own. An allreduce whose input and output lie in such memory on every rank runs
  // there, unfused (the fastest allreduce on one host, docs/algorithms.md); where that
  // differs between ranks it runs the usual way.
  Handle alloc_shared(const std::string& name, size_t bytes);

  // A name for an unnamed op: "<prefix>.noname.<n>", n counting this engine's unnamed ops
  // from 0 (every prefix shares the count). Ranks must then issue their unnamed ops in the
  // same order, as in Horovod. While this rank has joined, the others' unnamed ops count
  // here too (it takes part in them), so its next unnamed op after the join pairs with
  // theirs.
  std::string unnamed(const std::string& prefix);

  // For uneven data: this rank has no more work. Until every rank has joined, others' ops
  // run with this rank contributing zeros (allreduce, reduce_scatter), no rows (allgather)
  // or only receiving (broadcast, barrier). Blocks until every rank joined or `timeout`
  // (TimeoutError); returns the last rank to join. Enqueues while joined fail.
  int join(std::chrono::milliseconds timeout);
  // join() without blocking: the handle finishes once every rank has joined, and then
  // gives last_joined_rank().
  Handle join_async();

  // Starts (or restarts, truncating) a Chrome-trace timeline of this rank at `path`;
  // stop_timeline() closes the JSON array. IoError if the file cannot be opened.
  void start_timeline(const std::string& path);
  void stop_timeline();

  EngineStats stats() const;

  // Collective over every rank of this engine, each passing the same ranks (any order,
  // distinct, within [0, size())), in the same order as its other process-set calls: a new
  // set among those ranks, with ids counting up from 1 (0 names this engine). Its members
  // connect a communicator of their own (Communicator::split; this engine's communicator
  // must come from Communicator::create) and start an engine on it with this engine's
  // options; the call returns once they are connected. InvalidArgument on every rank when
  // the ranks differ between ranks, are malformed on any rank, or equal an existing set's
  // (or every rank: the whole group is set 0). Agreement runs as ops of this engine, so it
  // may not be called while this rank has joined.
  std::shared_ptr<class ProcessSet> add_process_set(std::vector<int> ranks);
  // Collective over every rank of this engine with the same id: shuts the set's engine down
  // on its members (their pending ops on it fail with IoError "engine shut down") and
  // forgets it. InvalidArgument on every rank for id 0, an unknown id, or ids that differ.
  void remove_process_set(int id);
  // The set with this id (0: this engine as a set of all ranks), or nullptr.
  std::shared_ptr<ProcessSet> process_set(int id) const;
  // Every set, ordered by id, set 0 first.
  std::vector<std::shared_ptr<ProcessSet>> process_sets() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A subset of an engine's ranks that runs collectives among itself (Engine::add_process_set).
// Ranks are the parent engine's; a member's engine numbers them 0..size()-1 in ascending
// order, so a broadcast root or an allgather's order is a rank *within* the set.
// Thread safety: any thread; engine() follows Engine's rules.
class ProcessSet {
 public:
  int id() const { return id_; }
  const std::vector<int>& ranks() const { return ranks_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  bool included() const { return rank_ >= 0; }
  // This rank's index in ranks(), or -1 when it is not a member.
  int rank() const { return rank_; }
  // The index in ranks() of the parent's rank `parent_rank`, or -1.
  int rank_of(int parent_rank) const;
  // The members' engine. InvalidArgument when this rank is not a member or the set was
  // removed.
  Engine& engine() const;
  bool removed() const;

  // For the parent engine: `engine` is owned (a member of an added set), or `parent` is the
  // set-0 view of the parent itself.
  ProcessSet(int id, std::vector<int> ranks, int parent_rank, std::unique_ptr<Engine> engine,
             Engine* parent = nullptr);
  ~ProcessSet();
  ProcessSet(const ProcessSet&) = delete;
  ProcessSet& operator=(const ProcessSet&) = delete;
  // Shuts the owned engine down and marks the set removed (the parent's remove_process_set).
  void retire();

 private:
  const int id_;
  const std::vector<int> ranks_;
  const int rank_;
  std::unique_ptr<Engine> owned_;
  Engine* engine_;
  std::atomic<bool> removed_{false};
};

}  // namespace chorus
