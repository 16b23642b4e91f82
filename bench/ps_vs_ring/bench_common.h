// Shared pieces of ps_vs_ring_bench: the options of every mode, the per-step timer and the
// one machine-readable result line each process prints (docs/benchmarks.md, "Ring vs
// parameter server on an emulated network").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::bench {

struct BenchArgs {
  std::string mode;  // ring | ps-server | ps-worker
  int64_t model_bytes = int64_t{64} << 20;
  int steps = 3;
  int warmup = 1;
  // ps modes
  std::string listen;           // ps-server: "host:port" to serve
  std::vector<std::string> ps;  // ps-worker: the servers, in ps index order
  int worker = 0;               // ps-worker: index; 0 is the chief
  int num_workers = 1;          // ps-worker: pushes per synchronous round
  std::string done_dir;         // ps-worker: where workers say they are done
};

// Parses argv; throws InvalidArgument on an unknown option or a missing value.
BenchArgs parse_args(int argc, char** argv);

// The median, minimum and maximum of the timed steps (seconds).
struct StepTimes {
  double median = 0, min = 0, max = 0;
};
StepTimes summarize(std::vector<double> seconds);

// Seconds of CPU (user + system, all threads) this process has used so far.
double process_cpu_seconds();
double wall_seconds();  // steady clock, seconds since an arbitrary start

// One line on stdout: "RESULT key=value ...", the keys given plus the step times, CPU
// seconds and wall seconds since `wall_start`. The analysis reads these lines only.
void print_result(const std::string& fields, const StepTimes& t, double wall_start);

}  // namespace chorus::bench
