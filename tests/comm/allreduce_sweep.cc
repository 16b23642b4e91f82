// Times every allreduce algorithm over message sizes on a group of threads, to place kAuto's
// crossovers (docs/algorithms.md). Not a test: run by hand, e.g.
//   build/tests/comm/comm_allreduce_sweep tcp 4
// Prints one line per size: bytes, then the median microseconds of each algorithm.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm_harness.h"

using namespace chorus;
using namespace chorus::comm::testing;

int main(int argc, char** argv) {
  std::string name = argc > 1 ? argv[1] : "tcp";
  int size = argc > 2 ? std::atoi(argv[2]) : 2;
  size_t max_bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : (size_t{16} << 20);
  Transport t = name == "shm"          ? Transport::kShm
                : name == "socketpair" ? Transport::kSocketpair
                                       : Transport::kTcp;
  Group group(t, size);
  const AllreduceAlgorithm algos[] = {AllreduceAlgorithm::kRing,
                                      AllreduceAlgorithm::kHalvingDoubling,
                                      AllreduceAlgorithm::kRecursiveDoubling};
  std::printf("# %s, %d ranks: bytes  ring_us  halving_doubling_us  recursive_doubling_us\n",
              name.c_str(), size);
  for (size_t bytes = 64; bytes <= max_bytes; bytes *= 4) {
    size_t count = bytes / 4;
    std::vector<std::vector<float>> buf(size, std::vector<float>(count, 1.0f));
    std::printf("%10zu", bytes);
    for (auto algo : algos) {
      for (int r = 0; r < size; ++r) set_algorithm(group[r], algo);
      int iters = static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / bytes, 5, 200));
      std::vector<double> us;
      group.run([&](int r, Communicator& comm) {
        for (int i = 0; i < iters; ++i) {
          comm.barrier();
          auto t0 = std::chrono::steady_clock::now();
          comm.allreduce(buf[r].data(), buf[r].data(), count, DataType::kFloat32, ReduceOp::kSum);
          auto dt = std::chrono::steady_clock::now() - t0;
          if (r == 0) us.push_back(std::chrono::duration<double, std::micro>(dt).count());
        }
      });
      std::sort(us.begin(), us.end());
      std::printf(" %12.1f", us[us.size() / 2]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
