// The Communicator's private state, shared by communicator.cc (the collectives) and
// communicator_create.cc (connecting through the store). make_communicator() also lets
// tests build a communicator over a hand-made Mesh.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "comm/allreduce_plan.h"
#include "comm/context.h"
#include "comm/mpi_comm.h"
#include "comm/placement.h"
#include "comm/shared_memory.h"
#include "transport/mesh.h"

namespace chorus {

// What a collective call is, for error messages: formatted only when an error is raised.
struct OpInfo {
  const char* op;
  size_t count;
  DataType type;
  int rank;
  int size;
  const char* reduce = nullptr;     // reduction op name, when there is one
  const char* algorithm = nullptr;  // allreduce algorithm name
  int root = -1;                    // broadcast root

  std::string text() const;
};

struct Communicator::Impl {
  Impl(std::unique_ptr<transport::Mesh> m, CommunicatorOptions o)
      : mesh(std::move(m)), options(std::move(o)) {}
  Impl(std::unique_ptr<comm::MpiComm> m, CommunicatorOptions o)
      : options(std::move(o)), mpi(std::move(m)) {}
  // A broken MPI communicator may have operations MPI never completes: its MPI state is
  // left alone (leaked) rather than freed under them.
  ~Impl() {
    if (broken && mpi) (void)mpi.release();
  }

  const transport::Topology& topology() const { return mpi ? mpi->topology() : mesh->topology(); }

  // Runs one collective: refuses on a broken communicator, gives `body` a Context whose
  // Progress has the call's deadline, and on IoError/TimeoutError breaks the communicator
  // (aborting the links so the other ranks fail fast) before rethrowing.
  template <typename Body>
  void run(const OpInfo& info, Body&& body);
  // The same for a collective through MPI (CHORUS_TRANSPORT=mpi): `body` gets the call's
  // deadline and name.
  template <typename Body>
  void run_mpi(OpInfo info, Body&& body);
  void check_usable(const char* op) const;
  // Whether every rank is on this host and may read (and open) its peers' memory: agreed
  // by every rank together at the first call (comm::agree_single_copy), then cached.
  bool peers_readable(comm::Context& ctx);
  // Ranks on this host: whether the streaming ring runs as for cores far apart, as
  // options.shm_placement says or, for 2 ranks, as rank 0's `placement` chooses from how
  // fast each mode ran lately (comm::agree_far, collective; more ranks count as near).
  bool cores_far(comm::Context& ctx);
  // Whether `placement` chooses: shm_placement `auto` and 2 ranks.
  bool learns_placement(const comm::Context& ctx) const;
  // The streaming ring in the mode cores_far() gave, timed for `placement` on rank 0.
  void run_streaming(comm::Context& ctx, bool far, const void* send, void* recv, size_t count,
                     DataType type, ReduceOp op);
  // The facts an allreduce plan of `bytes` depends on; send/recv/count/type/op feed the
  // shared-memory handshake, which the plan asks for only when it may apply.
  comm::AllreduceFacts allreduce_facts(comm::Context& ctx, size_t bytes, bool parts,
                                       const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op);
  // Plans (comm::plan_allreduce), names the plan in `info` and, with CHORUS_LOG_PLANS, in
  // the log.
  comm::AllreducePlan plan(comm::Context& ctx, OpInfo& info, const comm::AllreduceFacts& facts);
  // Runs a planned allreduce of one buffer (send may equal recv).
  void run_allreduce(comm::Context& ctx, const comm::AllreducePlan& plan, const void* send,
                     void* recv, size_t count, DataType type, ReduceOp op);
  // Adasum of each part, a tensor of its own, in one collective (comm::adasum_vhdd; through
  // MPI, a gather and the combination here, part by part). REQUIRES: checked as an
  // allreduce, size() > 1, some part not empty.
  void adasum(OpInfo& info, const std::vector<BufferPart>& parts, DataType type);
  // A ring allgather / reduce-scatter's mode (comm::plan_ring), named in `info`.
  comm::RingMode ring_mode(comm::Context& ctx, OpInfo& info, size_t bytes);
  void fail(std::string_view reason) noexcept;  // reason: this rank's error, for its peers

  // Nested classes may use Communicator's private constructor.
  static std::unique_ptr<Communicator> wrap(std::unique_ptr<Impl> impl) {
    return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
  }

  std::unique_ptr<transport::Mesh> mesh;  // null when collectives run through MPI
  CommunicatorOptions options;
  std::unique_ptr<comm::MpiComm> mpi;  // CHORUS_TRANSPORT=mpi: the collectives' path
  // The store create() connected through (nullptr for hand-made meshes), for split(); a
  // split communicator owns the prefixed view of its parent's store it was created with.
  Store* store = nullptr;
  std::unique_ptr<Store> owned_store;
  std::atomic<bool> broken{false};
  comm::Workspace workspace;
  std::vector<size_t> uniform_counts;  // allgather / alltoall's per-rank counts
  // -1: not asked yet; 0: no; 1: every rank can. Written by the thread running collectives,
  // read by single_copy() from any thread.
  std::atomic<int> single_copy_agreed{-1};
  comm::SharedMemory shared;         // alloc_shared's allocations and the allreduce in them
  comm::PlacementChooser placement;  // rank 0's near / far choice for the streaming ring
  const char* last_plan = "";        // the plan of the last collective (a static string)
};

namespace comm {

// A communicator over an existing mesh (which must be connected and have every link).
std::unique_ptr<Communicator> make_communicator(std::unique_ptr<transport::Mesh> mesh,
                                                const CommunicatorOptions& options);

}  // namespace comm
}  // namespace chorus
