// A rank of a stalled job, for stall_test.py: rank 1 submits its tensor STALL_WORKER_DELAY_MS
// (default 3000) late, so rank 0's stall inspector warns about it; both then finish.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "chorus/engine.h"
#include "chorus/job.h"

int main() {
  auto job = chorus::Job::from_env();
  auto engine = chorus::Engine::start(job->world());
  const char* delay = std::getenv("STALL_WORKER_DELAY_MS");
  if (job->world().rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay ? std::atoi(delay) : 3000));
  }
  std::vector<float> in(4, 1.0f), out(4);
  engine
      ->allreduce("grad/late", in.data(), out.data(), chorus::DataType::kFloat32, {4},
                  chorus::ReduceOp::kSum)
      .wait();
  std::printf("rank %d: %g\n", job->world().rank(), out[0]);
  return out[0] == static_cast<float>(job->world().size()) ? 0 : 1;
}
