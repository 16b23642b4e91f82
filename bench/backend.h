// The collectives a benchmark times, behind one interface so that chorus and its peers
// (OpenMPI, Gloo) run through the same sweep, timing method and output columns.
//
// Each backend lives in its own file; a backend that was not built (its library missing
// at configure time) is a stub whose make_*_backend() throws NotBuilt, so call sites need
// no #ifdef (the pattern of mlx's distributed backends).
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "chorus/dtype.h"

namespace chorus::bench {

enum class Op { kAllreduce, kAllgather, kBroadcast, kReduceScatter, kAlltoall };

// "allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall".
const char* op_name(Op op);
// Inverse of op_name; "all" gives every op. Throws InvalidArgument on an unknown name.
std::vector<Op> parse_ops(const std::string& name);

// Raised by a backend compiled without its library.
class NotBuilt : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One rank's view of a group. Buffers are sized by the sweep (see sweep.h):
//   allreduce:      send, recv: count elements; recv = sum over ranks of send.
//   allgather:      send: count, recv: count * size elements.
//   broadcast:      recv: count elements, from rank 0 (send unused).
//   reduce_scatter: send: count * size, recv: count elements (block rank of the sum).
//   alltoall:       send, recv: count * size elements (count per peer).
// Every rank calls every method in the same order.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether `op` on `type` can be timed by this backend.
  virtual bool supports(Op op, DataType type) const = 0;
  // Runs one sum-collective (out of place where the library allows it).
  virtual void run(Op op, const void* send, void* recv, size_t count, DataType type) = 0;
  // Returns once every rank has entered.
  virtual void barrier() = 0;
  // values[i] = max over ranks of values[i]; same length on every rank.
  virtual void max_across_ranks(std::vector<double>& values) = 0;
  // Memory for the sweep's send and recv buffers (every rank asks for the same sizes in the
  // same order), or null: ordinary memory.
  virtual std::shared_ptr<void> allocate(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
};

struct ChorusBackendOptions {
  std::string algorithm;        // --algo; empty: CHORUS_ALLREDUCE_ALGO or auto
  bool shared_buffers = false;  // --shared-buffers: buffers from Communicator::alloc_shared
};

// Under chorusrun, or by hand with CHORUS_RANK/SIZE/SECRET and MASTER_ADDR/PORT (rank 0
// serves the store) or CHORUS_STORE_ADDR; see chorus/job.h.
std::unique_ptr<Backend> make_chorus_backend(const ChorusBackendOptions& options);
// Under mpirun: MPI_Init, MPI_COMM_WORLD. Finalizes when destroyed.
std::unique_ptr<Backend> make_mpi_backend();
// Rank and size from CHORUS_RANK/CHORUS_SIZE (or OMPI_COMM_WORLD_RANK/SIZE); rendezvous
// through a gloo FileStore in `store_dir` (shared by all ranks); TCP on `iface`.
std::unique_ptr<Backend> make_gloo_backend(const std::string& store_dir, const std::string& iface);

}  // namespace chorus::bench
