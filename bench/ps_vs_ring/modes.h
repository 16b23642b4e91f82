// The modes of ps_vs_ring_bench. Each returns the process's exit status.
#pragma once

#include "bench_common.h"

namespace chorus::bench {

// Allreduce of model_bytes of float32 per step over the world from Job::from_env().
int run_ring(const BenchArgs& args);

// A parameter server at args.listen until the chief shuts the servers down.
int run_ps_server(const BenchArgs& args);
// Synchronous steps against args.ps: push the whole gradient, pull the new parameters.
int run_ps_worker(const BenchArgs& args);

}  // namespace chorus::bench
