// Not a test: measures a 2-rank mesh (threads of one process) over shm and tcp.
//   link_bench [iterations]
// Latency: half the round trip of an 8-byte ping-pong. Bandwidth: one direction, each
// message of `size` bytes sent then acknowledged with 1 byte.
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "mesh_harness.h"

namespace chorus::transport {
namespace {

void ping_pong(Mesh& mesh, size_t n, int iters) {
  std::vector<char> buf(n);
  Progress progress(Deadline::after(std::chrono::seconds(120)), "bench");
  Link& link = mesh.link(1 - mesh.rank());
  for (int i = 0; i < iters; ++i) {
    Transfer t[2] = {Transfer::send(link, buf.data(), n), Transfer::recv(link, buf.data(), n)};
    if (mesh.rank() == 0) {
      progress.finish(&t[0], 1);
      progress.finish(&t[1], 1);
    } else {
      progress.finish(&t[1], 1);
      progress.finish(&t[0], 1);
    }
  }
}

void stream(Mesh& mesh, size_t n, int iters) {
  std::vector<char> buf(n);
  char ack = 0;
  Progress progress(Deadline::after(std::chrono::seconds(120)), "bench");
  Link& link = mesh.link(1 - mesh.rank());
  for (int i = 0; i < iters; ++i) {
    Transfer data = mesh.rank() == 0 ? Transfer::send(link, buf.data(), n)
                                     : Transfer::recv(link, buf.data(), n);
    progress.finish(&data, 1);
    Transfer a = mesh.rank() == 0 ? Transfer::recv(link, &ack, 1) : Transfer::send(link, &ack, 1);
    progress.finish(&a, 1);
  }
}

void run(TransportKind kind, const char* name, int iters) {
  testing::TestStore store;
  testing::run_ranks(2, [&](int rank) {
    auto client = store.client(std::string(name) + "/");
    MeshOptions o = testing::options(kind, store.secret());
    if (const char* ring = std::getenv("CHORUS_SHM_RING_BYTES"))
      o.shm_ring_bytes = std::atoll(ring);
    auto mesh = connect_mesh(*client, rank, 2, o);
    ping_pong(*mesh, 8, 1000);
    auto t0 = Clock::now();
    ping_pong(*mesh, 8, iters);
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (rank == 0) std::printf("%s 8 B half round trip: %.2f us\n", name, us / iters / 2);
    for (size_t n : {size_t{1} << 20, size_t{16} << 20, size_t{64} << 20}) {
      int reps = static_cast<int>(std::max<size_t>(4, (size_t{512} << 20) / n));
      stream(*mesh, n, 2);
      auto s0 = Clock::now();
      stream(*mesh, n, reps);
      double sec = std::chrono::duration<double>(Clock::now() - s0).count();
      if (rank == 0) {
        std::printf("%s %6zu KiB one way: %.2f GB/s\n", name, n >> 10, n * reps / sec / 1e9);
      }
    }
  });
}

}  // namespace
}  // namespace chorus::transport

int main(int argc, char** argv) {
  int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  chorus::transport::run(chorus::transport::TransportKind::kShm, "shm", iters);
  chorus::transport::run(chorus::transport::TransportKind::kTcp, "tcp", iters / 4);
}
