// ps_vs_ring_bench: one synchronous training step's communication, timed two ways on the
// same model size: a ring allreduce of the gradient (every worker), or a push of the
// gradient to k parameter servers followed by a pull of the updated parameters.
//
//   ring       ps_vs_ring_bench ring [--model-mb 64] [--steps 3] [--warmup 1]
//              (torchrun-style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CHORUS_SECRET)
//   ps-server  ps_vs_ring_bench ps-server --listen HOST:PORT          (CHORUS_SECRET)
//   ps-worker  ps_vs_ring_bench ps-worker --ps H:P,H:P --worker I --num-workers N
//                  --done-dir DIR [--model-mb 64] [--steps 3] [--warmup 1]
//
// Every timing process prints one "RESULT key=value ..." line (median/min/max step seconds,
// its CPU seconds); bench/ps_vs_ring/run.sh starts them in network namespaces and
// analyze.py turns the lines into docs/benchmarks.md's table. Exit: 0 done, 1 error,
// 3 the ps modes were not built (chorus_ps missing at configure time).
#include <cstdio>
#include <exception>

#include "modes.h"

int main(int argc, char** argv) try {
  using namespace chorus::bench;
  BenchArgs args = parse_args(argc, argv);
  if (args.mode == "ring") return run_ring(args);
  if (args.mode == "ps-server" || args.mode == "ps-worker") {
    return args.mode == "ps-server" ? run_ps_server(args) : run_ps_worker(args);
  }
  std::fprintf(stderr, "ps_vs_ring_bench: unknown mode '%s' (ring, ps-server, ps-worker)\n",
               args.mode.c_str());
  return 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ps_vs_ring_bench: %s\n", e.what());
  return 1;
}
