// A program outside chorus's tree, built against an installed chorus (find_package or
// pkg-config): joins the job its launcher started, allreduces, checks the exact sum.
// Rank 0 prints "consumer ok: chorus VERSION, N ranks, sum S"; exit 1 on a wrong sum.
#include <chorus/job.h>
#include <chorus/version.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  if (std::strcmp(chorus::version(), CHORUS_VERSION_STRING) != 0) {
    std::fprintf(stderr, "headers %s, library %s\n", CHORUS_VERSION_STRING, chorus::version());
    return 1;
  }
  auto job = chorus::Job::from_env();
  chorus::Communicator& world = job->world();
  const int n = world.size();
  std::vector<float> data(1000, static_cast<float>(world.rank() + 1));
  world.allreduce(data.data(), data.data(), data.size(), chorus::DataType::kFloat32,
                  chorus::ReduceOp::kSum);
  const float want = n * (n + 1) / 2.0f;
  for (float v : data) {
    if (v != want) {
      std::fprintf(stderr, "rank %d: got %g, want %g\n", world.rank(), v, want);
      return 1;
    }
  }
  if (world.rank() == 0) {
    std::printf("consumer ok: chorus %s, %d ranks, sum %g\n", chorus::version(), n, want);
  }
  return 0;
}
