// Helpers for communicator tests: groups of communicators whose ranks run as threads of
// this process — over a real TcpStoreServer and connect_mesh (tcp or shm), or over Unix
// socketpairs (kernel sockets without any rendezvous) — and random data per rank.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../transport/mesh_harness.h"
#include "chorus/communicator.h"
#include "chorus/error.h"
#include "chorus/store.h"
#include "comm/communicator_impl.h"
#include "transport/mesh.h"
#include "transport/tcp/tcp_link.h"

namespace chorus::comm::testing {

enum class Transport { kSocketpair, kTcp, kShm };

inline const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kSocketpair:
      return "socketpair";
    case Transport::kTcp:
      return "tcp";
    case Transport::kShm:
      return "shm";
  }
  return "?";
}

// A mesh whose links are given (every rank on one host).
class GivenMesh : public transport::Mesh {
 public:
  GivenMesh(int rank, int size) {
    topology_.rank = rank;
    topology_.size = size;
    topology_.local_rank = rank;
    topology_.local_size = size;
    topology_.host_of_rank.assign(size, 0);
    links_.resize(size);
  }
  void set_link(int peer, std::unique_ptr<transport::Link> link) { links_[peer] = std::move(link); }
};

inline std::vector<std::unique_ptr<Communicator>> socketpair_group(
    int size, const CommunicatorOptions& options) {
  std::vector<std::unique_ptr<GivenMesh>> meshes;
  for (int r = 0; r < size; ++r) meshes.push_back(std::make_unique<GivenMesh>(r, size));
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      int fds[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
        CHORUS_THROW(IoError, "socketpair failed");
      }
      meshes[i]->set_link(j, std::make_unique<transport::TcpLink>(j, net::Fd(fds[0]), "pair"));
      meshes[j]->set_link(i, std::make_unique<transport::TcpLink>(i, net::Fd(fds[1]), "pair"));
    }
  }
  std::vector<std::unique_ptr<Communicator>> group;
  for (auto& m : meshes) group.push_back(make_communicator(std::move(m), options));
  return group;
}

// Runs fn(rank) on `size` threads; rethrows the first rank's exception after all joined.
inline void run_ranks(int size, const std::function<void(int)>& fn) {
  for (const auto& e : transport::testing::run_ranks(size, fn)) {
    if (e) std::rethrow_exception(e);
  }
}

// Owns a store server (when the transport needs one) and a group of communicators.
class Group {
 public:
  Group(Transport transport, int size, CommunicatorOptions options = default_options()) {
    if (transport == Transport::kSocketpair) {
      comms_ = socketpair_group(size, options);
      return;
    }
    options.transport = transport == Transport::kTcp ? "tcp" : "shm";
    connect(size, options, nullptr);
  }
  // Through the store with `options` as they are, each rank's adjusted by per_rank(r, o)
  // (e.g. a host id per rank, to place ranks on several "hosts").
  using PerRank = std::function<void(int, CommunicatorOptions&)>;
  Group(int size, const CommunicatorOptions& options, const PerRank& per_rank) {
    connect(size, options, per_rank);
  }

  static CommunicatorOptions default_options() {
    CommunicatorOptions o;
    o.timeout = std::chrono::seconds(30);  // a hang fails the test instead of stalling CI
    return o;
  }

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& operator[](int r) { return *comms_[r]; }
  // Runs fn(rank, communicator) on every rank at once.
  void run(const std::function<void(int, Communicator&)>& fn) {
    run_ranks(size(), [&](int r) { fn(r, *comms_[r]); });
  }

 private:
  void connect(int size, CommunicatorOptions options, const PerRank& per_rank) {
    Secret secret = Secret::generate();
    server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, secret);
    options.secret = secret;
    comms_.resize(size);
    for (int r = 0; r < size; ++r) {
      clients_.push_back(std::make_unique<TcpStoreClient>("127.0.0.1", server_->port(), secret,
                                                          std::chrono::seconds(20)));
    }
    run_ranks(size, [&](int r) {
      CommunicatorOptions o = options;
      if (per_rank) per_rank(r, o);
      comms_[r] = Communicator::create(*clients_[r], r, size, o);
    });
  }

  std::unique_ptr<TcpStoreServer> server_;
  std::vector<std::unique_ptr<TcpStoreClient>> clients_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// A parameterised suite's group: transport and number of ranks, named "tcp_4".
struct GroupParam {
  Transport transport;
  int size;
};

inline std::string param_name(const ::testing::TestParamInfo<GroupParam>& info) {
  return std::string(transport_name(info.param.transport)) + "_" + std::to_string(info.param.size);
}

// The transports the parameterised suites run over: the real ones, through
// Communicator::create and a TcpStoreServer.
inline std::vector<Transport> transports_under_test() { return {Transport::kTcp, Transport::kShm}; }

// Chooses the allreduce algorithm of an existing communicator (options() is a const view of
// the communicator's own, non-const, options; only tests change them after creation).
inline void set_algorithm(Communicator& comm, AllreduceAlgorithm algo) {
  const_cast<CommunicatorOptions&>(comm.options()).allreduce_algorithm = algo;
}

// splitmix64: fast deterministic random numbers for large buffers.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform integer in [lo, hi].
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  // Uniform double in [lo, hi).
  double real(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
  }

 private:
  uint64_t state_;
};

}  // namespace chorus::comm::testing
