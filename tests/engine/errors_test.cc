// Engine errors: every mismatch kind reaches every rank, duplicate names, shutdown with
// pending ops, re-init on the same communicators.
#include <gtest/gtest.h>

#include <thread>

#include "engine_harness.h"

namespace chorus::engine::testing {
namespace {

struct MismatchCase {
  const char* label;
  // Enqueues rank r's version of tensor "x" (which differs across ranks).
  std::function<Handle(Engine&, int, std::vector<float>&)> submit;
  std::vector<std::string> expected;  // substrings of the error on every rank
};

std::vector<MismatchCase> mismatch_cases() {
  return {
      {"shape",
       [](Engine& e, int r, std::vector<float>& b) {
         return e.allreduce("grad/fc1", b.data(), b.data(), DataType::kFloat32, {2, 3 + r});
       },
       {"Mismatched allreduce tensor shapes for 'grad/fc1': rank 0 has [2, 3], rank 1 has [2, 4]"}},
      {"dtype",
       [](Engine& e, int r, std::vector<float>& b) {
         return e.allreduce("grad/fc1", b.data(), b.data(),
                            r == 0 ? DataType::kFloat32 : DataType::kInt32, {4});
       },
       {"Mismatched data types for 'grad/fc1': rank 0 has float32, rank 1 has int32"}},
      {"op",
       [](Engine& e, int r, std::vector<float>& b) {
         return r == 0 ? e.allreduce("grad/fc1", b.data(), b.data(), DataType::kFloat32, {4})
                       : e.broadcast("grad/fc1", b.data(), DataType::kFloat32, {4}, 0);
       },
       {"Mismatched operations for 'grad/fc1': rank 0 has allreduce, rank 1 has broadcast"}},
      {"root",
       [](Engine& e, int r, std::vector<float>& b) {
         return e.broadcast("grad/fc1", b.data(), DataType::kFloat32, {4}, r);
       },
       {"Mismatched broadcast root ranks for 'grad/fc1': rank 0 has 0, rank 1 has 1"}},
      {"prescale",
       [](Engine& e, int r, std::vector<float>& b) {
         return e.allreduce("grad/fc1", b.data(), b.data(), DataType::kFloat32, {4}, ReduceOp::kSum,
                            r == 0 ? 1.0 : 0.5);
       },
       {"Mismatched prescale factors for 'grad/fc1': rank 0 has 1, rank 1 has 0.5"}},
      {"postscale",
       [](Engine& e, int r, std::vector<float>& b) {
         return e.allreduce("grad/fc1", b.data(), b.data(), DataType::kFloat32, {4}, ReduceOp::kSum,
                            1.0, r == 0 ? 1.0 : 2.0);
       },
       {"Mismatched postscale factors for 'grad/fc1': rank 0 has 1, rank 1 has 2"}},
      {"reduce_op",
       [](Engine& e, int r, std::vector<float>& b) {
         return e.allreduce("grad/fc1", b.data(), b.data(), DataType::kFloat32, {4},
                            r == 0 ? ReduceOp::kSum : ReduceOp::kMax);
       },
       {"Mismatched reduce ops for 'grad/fc1': rank 0 has sum, rank 1 has max"}},
      {"allgather_dims",
       [](Engine& e, int r, std::vector<float>& b) {
         return e.allgather("grad/fc1", b.data(), DataType::kFloat32, {1 + r, 2 + r});
       },
       {"Mismatched allgather tensor shapes (dimensions after the first must agree) for "
        "'grad/fc1': rank 0 has [1, 2], rank 1 has [2, 3]"}},
  };
}

TEST(EngineErrors, EveryMismatchKindFailsOnEveryRank) {
  EngineGroup g(2);
  for (const auto& c : mismatch_cases()) {
    SCOPED_TRACE(c.label);
    g.run([&](int r, Engine& e) {
      std::vector<float> buf(16, 1.f);
      Handle h = c.submit(e, r, buf);
      std::string msg = error_of<InvalidArgument>([&] { h.wait(kWait); });
      for (const auto& want : c.expected) EXPECT_NE(msg.find(want), std::string::npos) << msg;
      // The engine keeps working, and the name is free again.
      std::vector<float> ok(3, 1.f);
      e.allreduce("grad/fc1", ok.data(), ok.data(), DataType::kFloat32, {3}).wait(kWait);
      EXPECT_EQ(ok[0], 2.f);
    });
  }
}

TEST(EngineErrors, MismatchAgainstCachedEntry) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    std::vector<float> buf(8, 1.f);
    for (int i = 0; i < 3; ++i) {
      e.allreduce("w", buf.data(), buf.data(), DataType::kFloat32, {4}).wait(kWait);
    }
    auto h = e.allreduce("w", buf.data(), buf.data(), DataType::kFloat32, {r == 0 ? 4 : 8});
    std::string msg = error_of<InvalidArgument>([&] { h.wait(kWait); });
    EXPECT_NE(msg.find("rank 0 has [4], rank 1 has [8]"), std::string::npos) << msg;
  });
}

TEST(EngineErrors, SecondInFlightOpWithSameName) {
  EngineGroup g(2);
  std::vector<float> a(4, 1.f), b(4, 1.f);
  // Rank 1 does not submit yet, so the first op stays in flight.
  Handle first = g[0].allreduce("dup", a.data(), a.data(), DataType::kFloat32, {4});
  std::string msg = error_of<InvalidArgument>(
      [&] { g[0].allreduce("dup", b.data(), b.data(), DataType::kFloat32, {4}); });
  EXPECT_NE(msg.find("a second op named 'dup'"), std::string::npos) << msg;
  std::vector<float> c(4, 2.f);
  g[1].allreduce("dup", c.data(), c.data(), DataType::kFloat32, {4}).wait(kWait);
  first.wait(kWait);
  EXPECT_EQ(a[0], 3.f);
}

TEST(EngineErrors, ArgumentChecksAtEnqueue) {
  EngineGroup g(2);
  std::vector<float> a(4);
  EXPECT_THROW(g[0].allreduce("", a.data(), a.data(), DataType::kFloat32, {4}), InvalidArgument);
  EXPECT_THROW(g[0].broadcast("b", a.data(), DataType::kFloat32, {4}, 2), InvalidArgument);
  EXPECT_THROW(g[0].alltoall("t", a.data(), DataType::kFloat32, {3}), InvalidArgument);
  EXPECT_THROW(g[0].alltoall("t", a.data(), DataType::kFloat32, {4}, {1, 2}), InvalidArgument);
  EXPECT_THROW(g[0].allgather("s", a.data(), DataType::kFloat32, {}), InvalidArgument);
  EXPECT_THROW(g[0].allreduce("n", a.data(), a.data(), DataType::kFloat32, {-1}), InvalidArgument);
}

TEST(EngineErrors, ShutdownFailsPendingOpsOnEveryRank) {
  EngineGroup g(2);
  std::vector<float> a(4, 1.f);
  Handle pending = g[0].allreduce("lonely", a.data(), a.data(), DataType::kFloat32, {4});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  g[0].shutdown();
  std::string msg = error_of<IoError>([&] { pending.wait(kWait); });
  EXPECT_NE(msg.find("engine shut down"), std::string::npos) << msg;
  // Rank 1's engine stopped at the same cycle: its enqueues fail at once.
  std::vector<float> b(4, 1.f);
  auto deadline = Clock::now() + kWait;
  std::string later;
  while (later.empty() && Clock::now() < deadline) {
    later = error_of<IoError>([&] {
      auto h = g[1].allreduce("after", b.data(), b.data(), DataType::kFloat32, {4});
      h.wait(kWait);
    });
  }
  EXPECT_NE(later.find("engine shut down"), std::string::npos) << later;
}

TEST(EngineErrors, ReinitOnTheSameCommunicators) {
  EngineGroup g(2);
  for (int round = 0; round < 3; ++round) {
    g.run([&](int r, Engine& e) {
      std::vector<float> a(4, static_cast<float>(r + round));
      e.allreduce("x", a.data(), a.data(), DataType::kFloat32, {4}).wait(kWait);
      EXPECT_EQ(a[0], static_cast<float>(1 + 2 * round));
    });
    g.stop();
    g.start(test_options());
  }
}

}  // namespace
}  // namespace chorus::engine::testing
