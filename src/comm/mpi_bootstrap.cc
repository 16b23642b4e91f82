#include "comm/mpi_bootstrap.h"

#include <mpi.h>

#include <cstdint>
#include <exception>

#include "chorus/error.h"
#include "comm/mpi_service.h"

namespace chorus::mpi {

bool available() { return true; }

std::vector<int> offer_and_collect(const std::string& offer,
                                   const std::function<int(const std::string&)>& answer) {
  // Blocking calls on the MPI thread, as long as rank 0 takes to start: no deadline, as
  // under any mpirun job's MPI_Init.
  Service& service = Service::get();
  auto describe = [] { return std::string("the bare mpirun bootstrap"); };
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 0;
  std::string text;
  service.call(
      [&] {
        check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
        check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
        uint64_t length = rank == 0 ? offer.size() : 0;
        check(MPI_Bcast(&length, 1, MPI_UINT64_T, 0, comm), "MPI_Bcast");
        if (length > (1u << 20))
          CHORUS_THROW(IoError, "MPI bootstrap: rank 0 offered ", length, " bytes");
        text = rank == 0 ? offer : std::string(length, '\0');
        check(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, comm), "MPI_Bcast");
      },
      Deadline::never(), describe);
  int mine = -1;
  try {  // every rank must reach the gather, whatever happened here
    mine = answer(text);
  } catch (const std::exception&) {
  }
  std::vector<int> answers(rank == 0 ? size : 0);
  service.call(
      [&] {
        int rc = MPI_Gather(&mine, 1, MPI_INT, answers.data(), 1, MPI_INT, 0, comm);
        MPI_Comm_free(&comm);
        check(rc, "MPI_Gather");
      },
      Deadline::never(), describe);
  return answers;
}

}  // namespace chorus::mpi
