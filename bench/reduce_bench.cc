// Throughput of the reduction kernels: build/bench/reduce_bench (built with the tree, so
// it keeps compiling; run it by hand, on a quiet machine).
// Prints GB/s of reduce_into (bytes of `acc` per second; it reads acc and in and writes acc)
// for float32 and float16 sums, in cache (256 KiB) and at DRAM sizes (64 MiB).
#include <chrono>
#include <cstdio>
#include <vector>

#include "util/reduce.h"
#include "util/reduce_isa.h"

using namespace chorus;

double gbps(DataType t, size_t bytes, bool avx2) {
  reduce_detail::set_avx2_enabled(avx2);
  size_t n = bytes / dtype_size(t);
  std::vector<char> acc(bytes, 0), in(bytes, 0);
  size_t reps = std::max<size_t>(3, (size_t{2} << 30) / bytes);
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < reps; ++i) reduce_into(t, ReduceOp::kSum, acc.data(), in.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, bytes * reps / s / 1e9);
  }
  return best;
}

int main() {
  for (bool avx2 : {false, true}) {
    if (avx2 && !reduce_detail::avx2_available()) continue;
    for (size_t bytes : {size_t{256} << 10, size_t{64} << 20}) {
      std::printf("%-8s %6zu KiB  float32 sum %6.2f GB/s  float16 sum %6.2f GB/s\n",
                  avx2 ? "avx2" : "generic", bytes >> 10, gbps(DataType::kFloat32, bytes, avx2),
                  gbps(DataType::kFloat16, bytes, avx2));
    }
  }
  return 0;
}
