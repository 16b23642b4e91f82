// Where this process sits in a job, read from the environment of whichever launcher
// started it: chorusrun (CHORUS_*), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, ...,
// MASTER_ADDR/PORT), OpenMPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, ... of an srun step),
// or TF_CONFIG. docs/launcher.md (and the README's table) lists
// what is read from where and in which order.
//
// Precedence (the first source whose marker variable is set wins; CHORUS_LAUNCHER=<source>
// forces one):
//   0. elastic    CHORUS_ELASTIC_ID      (chorusrun --min-np/--max-np: rank from the store)
//   1. chorus     CHORUS_RANK            (chorusrun)
//   2. openmpi    OMPI_COMM_WORLD_RANK   (mpirun, also chorusrun --mpi)
//   3. torchrun   RANK                   (torchrun / torch.distributed.launch)
//   4. tf_config  TF_CONFIG
//   5. slurm      SLURM_PROCID           (last: Slurm variables are set in every step of an
//                                         allocation, even under another launcher; without
//                                         SLURM_STEP_ID, in a batch script or salloc's shell
//                                         outside srun, the process is a job of one)
//   6. single     none of the above: rank 0 of 1
//
// The store address, whatever the source: CHORUS_STORE_ADDR names a store someone else
// hosts (chorusrun); MASTER_ADDR + MASTER_PORT (torchrun, or given by hand for
// OpenMPI/Slurm) and TF_CONFIG's chief name a store that rank 0 hosts. A bare mpirun job
// with neither meets through MPI (meet_through_mpi, comm/mpi_bootstrap.h); a Slurm step with
// neither has rank 0 host it on the step's first node (127.0.0.1 when the step has one node)
// at CHORUS_STORE_PORT, MASTER_PORT or a port derived from the job and step ids
// (slurm::store_port, rendezvous/slurm.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "util/net.h"

namespace chorus {

struct JobEnv {
  int rank = 0;
  int size = 1;
  int local_rank = -1;  // -1: unknown, the mesh detects it
  int local_size = -1;
  int cross_rank = -1;                 // index of this host among the job's hosts; -1: unknown
  int cross_size = -1;                 // number of hosts; -1: unknown
  std::optional<net::Endpoint> store;  // the rendezvous store's address
  bool rank0_hosts_store = false;      // rank 0 must start the store at `store`
  bool meet_through_mpi = false;       // bare mpirun, no address: rank 0 offers one over MPI
  std::optional<Secret> secret;
  int restart_count = 0;
  std::string source;  // "chorus", "torchrun", "openmpi", "slurm", "tf_config", "single"
  // Names this run among the user's jobs when the launcher says (Slurm: "slurm-<job>.<step>");
  // empty otherwise. Ranks on one host without a configured secret share one under this name.
  std::string job_id;
  // An elastic worker (CHORUS_ELASTIC_ID, source "elastic", started by chorusrun --min-np
  // ...): rank and size are not known here but taken from the launcher's rounds in the
  // store (rendezvous/elastic_rounds.h); `rank` 0 and `size` 1 until then.
  std::string elastic_id;

  // TF_CONFIG only (empty / -1 otherwise). Ranks are given chief first, then workers, then
  // ps tasks, so `size` counts every task of the cluster; a ParameterServer strategy uses
  // `role` to tell servers from workers. An "evaluator" task is a job of its own (rank 0
  // of 1).
  std::string role;                                         // "chief", "worker", "ps", "evaluator"
  int task_index = -1;                                      // TF_CONFIG task.index
  std::map<std::string, std::vector<std::string>> cluster;  // TF_CONFIG cluster, as given
};

// Throws InvalidArgument with a message naming the variable when something is malformed
// or inconsistent (rank outside [0, size), a size of 0, ...). No launcher variables at all
// gives a single-process job (rank 0 of 1, source "single").
JobEnv read_job_env();

}  // namespace chorus
