// Helpers for transport tests: a real TcpStoreServer, ranks run as threads, random payloads.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "chorus/store.h"
#include "transport/mesh.h"
#include "transport/progress.h"

namespace chorus::transport::testing {

// A store server on loopback plus one client (and key prefix) per rank, so that blocking
// waits of one rank never queue behind another's.
class TestStore {
 public:
  TestStore() : secret_(Secret::generate()), server_("127.0.0.1", 0, secret_) {}
  const Secret& secret() const { return secret_; }
  uint16_t port() const { return server_.port(); }
  // Thread-safe: rank threads each ask for their own client.
  std::unique_ptr<Store> client(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    clients_.push_back(std::make_unique<TcpStoreClient>("127.0.0.1", server_.port(), secret_,
                                                        std::chrono::seconds(10)));
    auto* base = clients_.back().get();
    return std::make_unique<PrefixStore>(prefix, *base);
  }

 private:
  Secret secret_;
  TcpStoreServer server_;
  std::mutex mu_;
  std::vector<std::unique_ptr<TcpStoreClient>> clients_;  // GUARDED_BY(mu_)
};

inline MeshOptions options(TransportKind kind, const Secret& secret,
                           std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  MeshOptions o;
  o.kind = kind;
  o.secret = secret;
  o.timeout = timeout;
  return o;
}

// Runs fn(rank) on `size` threads; returns each rank's exception (null when none).
inline std::vector<std::exception_ptr> run_ranks(int size, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::string what(const std::exception_ptr& e) {
  if (!e) return "(no error)";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// Deterministic bytes for the message from `src` to `dst`, so the receiver can check them.
inline std::vector<char> payload(int src, int dst, size_t n) {
  std::vector<char> bytes(n);
  std::mt19937_64 gen(uint64_t(src) * 1000003u + uint64_t(dst) * 7919u + n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = gen();
    std::memcpy(bytes.data() + i, &v, 8);
  }
  for (; i < n; ++i) bytes[i] = static_cast<char>(gen());
  return bytes;
}

// Every rank sends payload(rank, p, n) to every p and checks what it receives.
// Returns the number of mismatching messages.
inline int exchange_all_pairs(Mesh& mesh, size_t n) {
  int me = mesh.rank();
  std::vector<std::vector<char>> out(mesh.size()), in(mesh.size());
  std::vector<Transfer> transfers;
  for (int p = 0; p < mesh.size(); ++p) {
    if (p == me) continue;
    out[p] = payload(me, p, n);
    in[p].assign(n, 0);
    transfers.push_back(Transfer::send(mesh.link(p), out[p].data(), n));
    transfers.push_back(Transfer::recv(mesh.link(p), in[p].data(), n));
  }
  Progress progress(Deadline::after(std::chrono::seconds(30)), "all-pairs exchange");
  progress.finish(transfers.data(), transfers.size());
  int bad = 0;
  for (int p = 0; p < mesh.size(); ++p) {
    if (p != me && in[p] != payload(p, me, n)) ++bad;
  }
  return bad;
}

}  // namespace chorus::transport::testing
