// A bare `mpirun -np N ./train` (no store address in the environment): chorus meets its
// ranks through MPI once. Rank 0 hosts the rendezvous store and offers where it is and the
// job's secret; every rank answers which of the offered addresses it reached. The data
// path stays chorus's own unless CHORUS_TRANSPORT=mpi. docs/launcher.md, "Bare mpirun".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "rendezvous/job_env.h"
#include "util/net.h"

namespace chorus::mpi {

// Whether this chorus was built with MPI (libopenmpi-dev present at configure time).
bool available();

// Over a duplicate of MPI_COMM_WORLD, on the MPI thread (mpi_service.h, which initialises
// MPI and keeps it until exit): a broadcast of rank 0's `offer`, each rank's
// `answer(offer)` (on the calling thread), a gather of the answers to rank 0.
// Rank 0 gets every rank's answer (its own first); the others get an empty vector.
// `answer` should not throw (a throw counts as -1: every rank must reach the gather).
// IoError when MPI fails, InvalidArgument when built without MPI.
std::vector<int> offer_and_collect(const std::string& offer,
                                   const std::function<int(const std::string&)>& answer);

// What a bare mpirun job's ranks agree on: where the store is and the job's secret.
struct Meeting {
  std::unique_ptr<TcpStoreServer> server;  // rank 0: the store it hosts
  net::Endpoint store;                     // the address every rank reached it at
  Secret secret;
};

// Rank 0 starts the store (on CHORUS_BIND_ADDRESS, loopback when every rank is on its host,
// else every interface) and offers its port, its addresses and the secret (`given`, or a
// fresh one when empty; a given one is never sent); every other rank connects to the
// offered addresses in turn and answers which it reached. Rank 0 then uses the address the
// most ranks reached. IoError on every rank when some rank reached none (naming the ranks
// and addresses), InvalidArgument when built without MPI.
Meeting meet_through_mpi(const JobEnv& env, const Secret& given);

}  // namespace chorus::mpi
