// ring: the gradient allreduced over the world (chorus's ring when CHORUS_ALLREDUCE_ALGO=ring,
// as run.sh sets it). A step is barrier + allreduce; a step's time is the maximum over ranks.
#include <cstdio>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "chorus/job.h"
#include "modes.h"

namespace chorus::bench {
namespace {

// Out of place, so the sum is the same every step: n(n+1)/2 everywhere.
double ring_step(Communicator& comm, const std::vector<float>& send, std::vector<float>& recv) {
  comm.barrier();
  double t0 = wall_seconds();
  comm.allreduce(send.data(), recv.data(), send.size(), DataType::kFloat32, ReduceOp::kSum);
  double t = wall_seconds() - t0;
  float want = comm.size() * (comm.size() + 1) / 2.0f;
  if (recv.front() != want || recv.back() != want) {
    CHORUS_THROW(Error, "ring: wrong sum ", recv.front(), " (want ", want, ")");
  }
  return t;
}

}  // namespace

int run_ring(const BenchArgs& args) {
  double wall_start = wall_seconds();
  auto job = Job::from_env();
  Communicator& comm = job->world();
  size_t count = static_cast<size_t>(args.model_bytes / 4);
  std::vector<float> send(count, static_cast<float>(comm.rank() + 1)), recv(count, 0.f);
  for (int i = 0; i < args.warmup; ++i) ring_step(comm, send, recv);
  std::vector<double> times;
  for (int i = 0; i < args.steps; ++i) times.push_back(ring_step(comm, send, recv));
  comm.allreduce(times.data(), times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax);
  std::string fields = "mode=ring n=" + std::to_string(comm.size()) +
                       " k=0 role=worker index=" + std::to_string(comm.rank()) +
                       " bytes=" + std::to_string(args.model_bytes) +
                       " algo=" + allreduce_algorithm_name(comm.options().allreduce_algorithm) +
                       " steps=" + std::to_string(args.steps) +
                       " warmup=" + std::to_string(args.warmup);
  print_result(fields, summarize(times), wall_start);
  return 0;
}

}  // namespace chorus::bench
