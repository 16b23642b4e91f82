// Built without MPI: a bare mpirun job must be given the store's address.
#include "chorus/error.h"
#include "comm/mpi_bootstrap.h"

namespace chorus::mpi {

bool available() { return false; }

std::vector<int> offer_and_collect(const std::string&,
                                   const std::function<int(const std::string&)>&) {
  CHORUS_THROW(InvalidArgument,
               "this chorus was built without MPI (libopenmpi-dev), so it cannot "
               "meet its ranks through mpirun");
}

}  // namespace chorus::mpi
