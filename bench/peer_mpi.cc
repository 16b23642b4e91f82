// OpenMPI as a peer: the same sweep over MPI_COMM_WORLD (started by mpirun).
#include <mpi.h>

#include "backend.h"
#include "chorus/error.h"

namespace chorus::bench {
namespace {

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

int as_int(size_t count) {
  CHORUS_CHECK_ARG(count <= static_cast<size_t>(INT32_MAX), "MPI count too large: ", count);
  return static_cast<int>(count);
}

class MpiBackend : public Backend {
 public:
  MpiBackend() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiBackend() override { MPI_Finalize(); }

  const char* name() const override { return "openmpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool supports(Op, DataType type) const override { return mpi_type(type) != MPI_DATATYPE_NULL; }

  void run(Op op, const void* send, void* recv, size_t count, DataType type) override {
    MPI_Datatype t = mpi_type(type);
    int c = as_int(count);
    switch (op) {
      case Op::kAllreduce:
        MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, c, t, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Op::kAllgather:
        MPI_Allgather(send, c, t, recv, c, t, MPI_COMM_WORLD);
        break;
      case Op::kBroadcast:
        MPI_Bcast(recv, c, t, 0, MPI_COMM_WORLD);
        break;
      case Op::kReduceScatter:
        MPI_Reduce_scatter_block(send, recv, c, t, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Op::kAlltoall:
        MPI_Alltoall(send, c, t, recv, c, t, MPI_COMM_WORLD);
        break;
    }
  }

  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

  void max_across_ranks(std::vector<double>& values) override {
    MPI_Allreduce(MPI_IN_PLACE, values.data(), as_int(values.size()), MPI_DOUBLE, MPI_MAX,
                  MPI_COMM_WORLD);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend() { return std::make_unique<MpiBackend>(); }

}  // namespace chorus::bench
