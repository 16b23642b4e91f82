// The one thread of this process that calls MPI. Everything chorus asks of MPI (the bare
// mpirun bootstrap, the MPI data path of every communicator and process set) is handed to
// it, so MPI needs no thread support beyond MPI_THREAD_FUNNELED, and calls of different
// communicators never run MPI concurrently. Collectives are started nonblocking and the
// thread tests every call's requests in turn: process sets whose calls interleave in
// different orders on different ranks still progress, never deadlock.
//
// MPI stays initialised from the first use until the process exits (MPI cannot be
// initialised twice); the service finalizes it at exit when it initialised it and nothing
// holds it then: a rank that exits with communicators still open (an unhandled error, no
// shutdown) leaves without MPI_Finalize, which makes mpirun end the job at once instead
// of every rank waiting in MPI_Finalize for it.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "util/deadline.h"

namespace chorus::mpi {

// Throws IoError "MPI: <what> failed: <MPI's message>" unless code is MPI_SUCCESS.
void check(int code, const char* what);

// What a caller waits for, for its TimeoutError: formatted only when raised.
using Describe = std::function<std::string()>;

class Service {
 public:
  // The process's service, started at the first call. Its thread initialises MPI with
  // MPI_THREAD_FUNNELED unless the program initialised MPI itself, which must then provide
  // MPI_THREAD_MULTIPLE (chorus calls MPI from its own thread): InvalidArgument otherwise,
  // naming the level. InvalidArgument also when MPI was finalized already; IoError when
  // MPI_Init fails. Every later call throws the same error.
  static Service& get();

  // Runs `fn` on the MPI thread (blocking MPI calls: communicator creation, the bootstrap)
  // and rethrows what it threw. TimeoutError(describe()) when it has not returned by
  // `deadline` (it may still be running: MPI calls cannot be cancelled).
  void call(const std::function<void()>& fn, Deadline deadline, const Describe& describe);

  // Runs `start` on the MPI thread, which starts nonblocking MPI operations and returns
  // their requests, and returns when every request completed (IoError when one failed).
  // TimeoutError as above: the operations may still complete later, into the buffers they
  // were given, so a caller that times out must treat those buffers as lost (the
  // communicator is broken then).
  void wait_for(const std::function<std::vector<MPI_Request>()>& start, Deadline deadline,
                const Describe& describe);

  // Whether the thread runs and MPI is usable (false after exit began).
  bool running() const;
  // Counts the users that need MPI (every MpiComm): MPI is finalized at exit only when
  // none is left.
  void hold();
  void release();

  struct Impl;

 private:
  Service() = default;
  Impl* impl_ = nullptr;
};

}  // namespace chorus::mpi
