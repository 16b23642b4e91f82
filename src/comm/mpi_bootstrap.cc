#include "comm/mpi_bootstrap.h"

#include <mpi.h>

#include <cstdint>
#include <exception>

#include "chorus/error.h"

namespace chorus::mpi {
namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  CHORUS_THROW(IoError, "MPI bootstrap: ", what, " failed: ", std::string(text, length));
}

// Initialises MPI for the session unless the program did; finalizes what it initialised.
class Session {
 public:
  Session() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init");
      owned_ = true;
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    // Errors come back as codes (check()), never as an abort of the job.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~Session() {
    MPI_Comm_free(&comm_);
    if (owned_) MPI_Finalize();
  }
  MPI_Comm comm() const { return comm_; }

 private:
  bool owned_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace

bool available() { return true; }

std::vector<int> offer_and_collect(const std::string& offer,
                                   const std::function<int(const std::string&)>& answer) {
  Session session;
  int rank = 0, size = 0;
  check(MPI_Comm_rank(session.comm(), &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(session.comm(), &size), "MPI_Comm_size");
  uint64_t length = rank == 0 ? offer.size() : 0;
  check(MPI_Bcast(&length, 1, MPI_UINT64_T, 0, session.comm()), "MPI_Bcast");
  if (length > (1u << 20))
    CHORUS_THROW(IoError, "MPI bootstrap: rank 0 offered ", length, " bytes");
  std::string text = rank == 0 ? offer : std::string(length, '\0');
  check(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, session.comm()), "MPI_Bcast");
  int mine = -1;
  try {  // every rank must reach the gather, whatever happened here
    mine = answer(text);
  } catch (const std::exception&) {
  }
  std::vector<int> answers(rank == 0 ? size : 0);
  check(MPI_Gather(&mine, 1, MPI_INT, answers.data(), 1, MPI_INT, 0, session.comm()), "MPI_Gather");
  return answers;
}

}  // namespace chorus::mpi
