// The sweep: for each op and each size (doubling from min_bytes to max_bytes), one
// verified run with known data, warm-up runs, then timed samples; rank 0 prints a row.
//
// Sizes follow nccl-tests: `bytes` (S) is the whole array: allreduce and broadcast move S
// bytes per rank; allgather and reduce_scatter have S = per-rank count x dtype x ranks;
// alltoall sends S bytes per rank (S / ranks to each peer). algbw = S / time and
// busbw = algbw x factor (allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall
// (n-1)/n; broadcast 1), both in GB/s (1e9 bytes).
//
// Timing: each sample is a barrier, then `batch` back-to-back ops timed on every rank
// (time / batch); a sample's time is the maximum over ranks; the row shows the median
// sample. Correctness is checked outside the timed loop: rank-dependent small integers,
// expected results computed locally, mismatches reported on stderr and as FAIL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "backend.h"
#include "chorus/dtype.h"

namespace chorus::bench {

struct SweepOptions {
  std::vector<Op> ops = {Op::kAllreduce};
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 256ull << 20;
  DataType dtype = DataType::kFloat32;
  int iters = 0;          // timed samples per size; 0: 200 below 32 MiB, 20 from there (never < 20)
  int warmup = -1;        // untimed runs per size; -1: 10 below 1 MiB, 5 below 32 MiB, else 2
  int batch = 0;          // ops per sample; 0: 10 up to 64 KiB, else 1
  size_t offset = 0;      // heap buffers start this many bytes into a page (libtorch's: 64)
  bool in_place = false;  // allreduce: send is recv (as a gradient is reduced)
  bool check = true;
  bool csv = false;
  std::string label;  // printed in the header / csv "backend" column; empty: backend name
};

// The per-size result on rank 0.
struct SweepRow {
  Op op;
  uint64_t bytes;  // S as above (rounded down to a whole number of elements per rank)
  double time_us;  // median over samples
  double algbw_gbps;
  double busbw_gbps;
  bool ok;  // verified run matched on every rank
  int iters;
};

// nccl-tests bus bandwidth factor for `op` on `ranks` ranks.
double bus_factor(Op op, int ranks);

// Runs the sweep on every rank; rank 0 prints to `out` as rows finish. Returns false when
// any verified run failed on any rank.
bool run_sweep(Backend& backend, const SweepOptions& options, std::ostream& out);

}  // namespace chorus::bench
