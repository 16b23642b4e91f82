// Built without MPI (no libopenmpi-dev): CHORUS_TRANSPORT=mpi is refused when the world is
// made, so no other member is ever called.
#include "chorus/error.h"
#include "comm/mpi_comm.h"

namespace chorus::comm {

struct MpiComm::State {
  transport::Topology topology;
};

bool MpiComm::available() { return false; }
bool MpiComm::threads_supported() { return false; }

std::unique_ptr<MpiComm> MpiComm::world(int, int, const std::string&, const MpiWait&) {
  CHORUS_THROW(InvalidArgument,
               "CHORUS_TRANSPORT=mpi: this chorus was built without MPI (libopenmpi-dev)");
}

MpiComm::MpiComm(std::unique_ptr<State> state) : state_(std::move(state)) {}
MpiComm::~MpiComm() = default;
const transport::Topology& MpiComm::topology() const { return state_->topology; }
std::unique_ptr<MpiComm> MpiComm::split(const std::vector<int>&, const std::string&,
                                        const MpiWait&) const {
  return nullptr;
}
void MpiComm::allreduce(const void*, void*, size_t, DataType, ReduceOp, const MpiWait&) {}
void MpiComm::allgatherv(const void*, void*, const std::vector<size_t>&, DataType, const MpiWait&) {
}
void MpiComm::broadcast(void*, size_t, DataType, int, const MpiWait&) {}
void MpiComm::reduce_scatter(const void*, void*, const std::vector<size_t>&, DataType, ReduceOp,
                             const MpiWait&) {}
void MpiComm::alltoallv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&,
                        DataType, const MpiWait&) {}
void MpiComm::barrier(const MpiWait&) {}

}  // namespace chorus::comm
