// Where this process sits in a job, read from the environment of whichever launcher
// started it: chorusrun (CHORUS_*), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, ...,
// MASTER_ADDR/PORT), OpenMPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, ... with the store
// address given explicitly), or TF_CONFIG. The README's table lists what is read from where
// and in which order.
#pragma once

#include <optional>
#include <string>

#include "chorus/store.h"
#include "util/net.h"

namespace chorus {

struct JobEnv {
  int rank = 0;
  int size = 1;
  int local_rank = -1;  // -1: unknown, the mesh detects it
  int local_size = -1;
  std::optional<net::Endpoint> store;  // the rendezvous store's address
  bool rank0_hosts_store = false;      // rank 0 must start the store at `store`
  std::optional<Secret> secret;
  int restart_count = 0;
  std::string source;  // "chorus", "torchrun", "openmpi", "slurm", "tf_config", "single"
};

// Throws InvalidArgument with a message naming the variable when something is malformed
// or inconsistent (rank outside [0, size), a size of 0, ...). No launcher variables at all
// gives a single-process job (rank 0 of 1, source "single").
JobEnv read_job_env();

}  // namespace chorus
