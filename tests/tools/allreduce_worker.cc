// A real training-like rank for the launcher tests: joins the job through chorus::Job
// (whatever launched it: chorusrun, chorusrun over ssh, mpirun), allreduces a rank-dependent
// float32 vector and checks the exact sum.
//
// allreduce_worker [--count N] [--iterations K] [--ready-dir DIR]
//   --count N        elements per allreduce (default 262147: uneven on purpose)
//   --iterations K   allreduces to run (default 3); 0 runs until one fails
//   --ready-dir DIR  after the first verified allreduce, write DIR/ready.<rank>
// On success prints "allreduce ok rank R of N local L/LS cross C/CS" and exits 0. On an
// error prints "allreduce_worker: rank R: <ErrorType>: <message>" on stderr and exits 1;
// a wrong sum exits 2; bad arguments exit 64.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "chorus/job.h"

namespace {

struct Args {
  size_t count = 262147;
  long iterations = 3;
  std::string ready_dir;
};

bool parse(int argc, char** argv, Args& args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--count") {
      args.count = std::strtoull(value.c_str(), nullptr, 10);
    } else if (flag == "--iterations") {
      args.iterations = std::strtol(value.c_str(), nullptr, 10);
    } else if (flag == "--ready-dir") {
      args.ready_dir = value;
    } else {
      return false;
    }
  }
  return argc % 2 == 1;
}

const char* type_of(const std::exception& e) {
  if (dynamic_cast<const chorus::TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const chorus::AuthError*>(&e)) return "AuthError";
  if (dynamic_cast<const chorus::IoError*>(&e)) return "IoError";
  if (dynamic_cast<const chorus::InvalidArgument*>(&e)) return "InvalidArgument";
  return "exception";
}

// Rank r, iteration t contributes r + 1 + (i + t) % 5 at element i: small integers, so the
// float32 sum is exact.
float value(int rank, size_t i, long t) { return static_cast<float>(rank + 1 + (i + t) % 5); }

// Index of the first wrong element of the sum over `size` ranks, or -1.
long first_wrong(const std::vector<float>& sum, int size, long t) {
  for (size_t i = 0; i < sum.size(); ++i) {
    float want = static_cast<float>(size * (size + 1) / 2 + size * ((i + t) % 5));
    if (sum[i] != want) return static_cast<long>(i);
  }
  return -1;
}

int report(int rank, const std::exception& e) {
  std::fprintf(stderr, "allreduce_worker: rank %d: %s: %s\n", rank, type_of(e), e.what());
  return 1;
}

int allreduce_loop(const Args& args, chorus::Communicator& comm) {
  const int rank = comm.rank();
  std::vector<float> send(args.count), recv(args.count);
  for (long t = 0; args.iterations == 0 || t < args.iterations; ++t) {
    for (size_t i = 0; i < args.count; ++i) send[i] = value(rank, i, t);
    comm.allreduce(send.data(), recv.data(), args.count, chorus::DataType::kFloat32,
                   chorus::ReduceOp::kSum);
    long bad = first_wrong(recv, comm.size(), t);
    if (bad >= 0) {
      std::fprintf(stderr, "allreduce_worker: rank %d: wrong sum at element %ld: %g\n", rank, bad,
                   recv[bad]);
      return 2;
    }
    if (t == 0 && !args.ready_dir.empty()) {
      std::ofstream(args.ready_dir + "/ready." + std::to_string(rank)) << "1\n";
    }
  }
  std::printf("allreduce ok rank %d of %d local %d/%d cross %d/%d\n", rank, comm.size(),
              comm.local_rank(), comm.local_size(), comm.cross_rank(), comm.cross_size());
  return 0;
}

// The error is reported before the job's teardown: the failed collective has already
// aborted the links, so a peer fails at once and its exit can get chorusrun to stop this
// rank while the teardown (slow with a host cut off) is still under way.
int run(const Args& args) {
  auto job = chorus::Job::from_env();
  chorus::Communicator& comm = job->world();
  try {
    return allreduce_loop(args, comm);
  } catch (const std::exception& e) {
    return report(comm.rank(), e);
  }
}

// The launcher's idea of this rank, for errors before the communicator exists.
int rank_from_env() {
  for (const char* name : {"CHORUS_RANK", "OMPI_COMM_WORLD_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, args)) {
    std::fprintf(stderr, "usage: allreduce_worker [--count N] [--iterations K] [--ready-dir D]\n");
    return 64;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {  // before the communicator existed
    return report(rank_from_env(), e);
  }
}
