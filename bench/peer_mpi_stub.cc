// Built when CMake found no MPI: the mpi peer mode reports that it is not built.
#include "backend.h"

namespace chorus::bench {

std::unique_ptr<Backend> make_mpi_backend() {
  throw NotBuilt("--peer mpi: not built (CMake found no MPI; install libopenmpi-dev)");
}

}  // namespace chorus::bench
