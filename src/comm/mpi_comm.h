// A communicator's collectives through MPI (CHORUS_TRANSPORT=mpi), so that on a cluster
// chorus moves its data the way the cluster's OpenMPI does (UCX, verbs, shared memory).
// Each MpiComm owns an MPI communicator of its own (a duplicate of MPI_COMM_WORLD, or a
// group of it for a split) and runs every call on the MPI thread (mpi_service.h) as a
// nonblocking collective. The Communicator checks arguments and turns errors into a broken
// communicator, as on its own links; the engine above does not know which path runs.
//
// Built without MPI (no libopenmpi-dev), world() throws InvalidArgument.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/dtype.h"
#include "transport/mesh.h"
#include "util/deadline.h"

namespace chorus::comm {

// How long a call may take, and what it is (for TimeoutError).
struct MpiWait {
  Deadline deadline;
  std::function<std::string()> describe;
};

class MpiComm {
 public:
  // Whether this chorus was built with MPI.
  static bool available();
  // Whether MPI runs at MPI_THREAD_MULTIPLE, so that a program's own MPI calls may run
  // beside chorus's MPI thread: only when the program initialised MPI itself at that level
  // (chorus asks for MPI_THREAD_FUNNELED). Starts the MPI thread (mpi_service.h) when no
  // MpiComm did; false when built without MPI.
  static bool threads_supported();
  // The job's world: a duplicate of MPI_COMM_WORLD, whose rank and size must be the job's
  // (`rank`, `size`: InvalidArgument otherwise, e.g. when chorusrun started the ranks
  // without mpirun). `host_id` names this rank's host for the topology. Collective.
  static std::unique_ptr<MpiComm> world(int rank, int size, const std::string& host_id,
                                        const MpiWait& wait);
  ~MpiComm();

  const transport::Topology& topology() const;

  // A communicator among `ranks` of this one (ascending, distinct, including this rank):
  // collective over those ranks only (MPI_Comm_create_group).
  std::unique_ptr<MpiComm> split(const std::vector<int>& ranks, const std::string& host_id,
                                 const MpiWait& wait) const;

  // As Communicator's collectives of the same names, whose checks the arguments passed.
  // Counts of one call's buffers (allgatherv, reduce_scatter, alltoallv: their sums) must
  // fit MPI's int: InvalidArgument otherwise. allreduce and broadcast have no such limit.
  void allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                 const MpiWait& wait);
  void allgatherv(const void* send, void* recv, const std::vector<size_t>& counts, DataType type,
                  const MpiWait& wait);
  void broadcast(void* buffer, size_t count, DataType type, int root, const MpiWait& wait);
  void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                      DataType type, ReduceOp op, const MpiWait& wait);
  void alltoallv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                 const std::vector<size_t>& recv_counts, DataType type, const MpiWait& wait);
  void barrier(const MpiWait& wait);

  struct State;

 private:
  explicit MpiComm(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace chorus::comm
