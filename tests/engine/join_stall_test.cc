// Join with uneven step counts; the stall inspector's warning and its shutdown.
#include <gtest/gtest.h>

#include <thread>

#include "engine_harness.h"

namespace chorus::engine::testing {
namespace {

TEST(EngineJoin, UnevenStepsAverageOverRanksStillTraining) {
  EngineGroup g(3);
  std::vector<int> last(3, -1);
  g.run([&](int r, Engine& e) {
    const int steps = 2 * (r + 1);  // rank 0: 2 steps, rank 1: 4, rank 2: 6
    for (int s = 0; s < steps; ++s) {
      std::vector<float> avg(5, static_cast<float>(r + 1)), sum(3, static_cast<float>(r + 1));
      auto h1 =
          e.allreduce("avg", avg.data(), avg.data(), DataType::kFloat32, {5}, ReduceOp::kAverage);
      auto h2 = e.allreduce("sum", sum.data(), sum.data(), DataType::kFloat32, {3});
      h1.wait(kWait);
      h2.wait(kWait);
      // Ranks still training at step s: those with more than s steps.
      float total = 0;
      int active = 0;
      for (int q = 0; q < 3; ++q) {
        if (2 * (q + 1) > s) {
          total += static_cast<float>(q + 1);
          ++active;
        }
      }
      EXPECT_FLOAT_EQ(avg[4], total / static_cast<float>(active)) << "rank " << r << " step " << s;
      EXPECT_FLOAT_EQ(sum[2], total) << "rank " << r << " step " << s;
    }
    last[r] = e.join(kWait);
  });
  EXPECT_EQ(last, (std::vector<int>{2, 2, 2}));
  // After everyone joined, ops run normally again.
  g.run([&](int r, Engine& e) {
    std::vector<float> a(2, 1.f);
    e.allreduce("avg", a.data(), a.data(), DataType::kFloat32, {2}, ReduceOp::kAverage).wait(kWait);
    EXPECT_EQ(a[0], 1.f);
    (void)r;
  });
}

// Under single copy a group is reduced where its tensors lie; a joined rank has no tensors
// and must still take part the same way (zeros from scratch), or the ranks would run
// different collectives.
TEST(EngineJoin, JoinedRankTakesPartInSingleCopyGroups) {
  EngineGroup g(2, test_options(), Transport::kShm);
  g.run([&](int r, Engine& e) {
    std::vector<float> big(1 << 18, 1.0f);  // 1 MiB: the ranks agree on single copy
    e.allreduce("big", big.data(), big.data(), DataType::kFloat32, {1 << 18}).wait(kWait);
    ASSERT_TRUE(g.comm(r).single_copy());
    if (r == 1) {
      EXPECT_EQ(e.join(kWait), 0);
      return;
    }
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> t;
      std::vector<Handle> hs;
      for (int i = 0; i < 16; ++i) t.emplace_back(300 + 20000 * i, static_cast<float>(i));
      for (int i = 0; i < 16; ++i) {
        hs.push_back(e.allreduce("t" + std::to_string(i), t[i].data(), t[i].data(),
                                 DataType::kFloat32, {static_cast<int64_t>(t[i].size())},
                                 ReduceOp::kSum));
      }
      for (auto& h : hs) h.wait(kWait);
      for (int i = 0; i < 16; ++i) {  // rank 1 contributed zeros
        ASSERT_EQ(t[i].back(), static_cast<float>(i)) << "step " << step << " tensor " << i;
      }
    }
    EXPECT_EQ(e.join(kWait), 0);
  });
  EXPECT_GT(g[0].stats().fused_in_place, 0u);
}

// Ranks that did not join named their ops "allreduce.noname.0" and ".1"; the joined rank
// took part in them, so its own next unnamed op is ".2" as theirs is, and they pair.
TEST(EngineJoin, UnnamedOpsPairAfterAJoin) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    if (r == 0) {
      EXPECT_EQ(e.join(kWait), 2);
    } else {
      for (int i = 0; i < 2; ++i) {
        float v = 1;
        e.allreduce(e.unnamed("allreduce"), &v, &v, DataType::kFloat32, {1}).wait(kWait);
      }
      if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_EQ(e.join(kWait), 2);
    }
    float v = static_cast<float>(r);
    std::string name = e.unnamed("allreduce");
    EXPECT_EQ(name, "allreduce.noname.2");
    e.allreduce(name, &v, &v, DataType::kFloat32, {1}).wait(kWait);
    EXPECT_EQ(v, 3.0f);
  });
}

TEST(EngineJoin, EnqueueWhileJoinedFails) {
  EngineGroup g(2);
  std::thread joiner([&] { g[0].join(kWait); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<float> a(2);
  EXPECT_THROW(g[0].allreduce("x", a.data(), a.data(), DataType::kFloat32, {2}), InvalidArgument);
  g[1].join(kWait);
  joiner.join();
}

EngineOptions stall_options(int check_ms, int shutdown_ms) {
  EngineOptions o = test_options();
  o.stall_check = std::chrono::milliseconds(check_ms);
  o.stall_shutdown = std::chrono::milliseconds(shutdown_ms);
  return o;
}

TEST(EngineStall, WarningNamesTensorAndMissingRanks) {
  EngineGroup g(2, stall_options(300, 0));
  ::testing::internal::CaptureStderr();
  g.run([&](int r, Engine& e) {
    std::vector<float> a(4, 1.f);
    // Step 1 fills the response cache; in step 2 rank 1 is late, so the stall is first seen
    // on the cache path and must still be reported with the missing rank.
    e.allreduce("grad/late", a.data(), a.data(), DataType::kFloat32, {4}).wait(kWait);
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    e.allreduce("grad/late", a.data(), a.data(), DataType::kFloat32, {4}).wait(kWait);
    EXPECT_EQ(a[0], 4.f);
  });
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("tensor 'grad/late' (allreduce) submitted by ranks [0], missing ranks [1]"),
            std::string::npos)
      << err;
  EXPECT_GE(g[0].stats().stall_warnings, 1u);
}

TEST(EngineStall, ShutdownFailsPendingHandlesOnEveryRank) {
  EngineGroup g(2, stall_options(200, 500));
  std::vector<std::string> errors(2);
  g.run([&](int r, Engine& e) {
    std::vector<float> a(4, 1.f);
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    errors[r] = error_of<TimeoutError>([&] {
      e.allreduce("grad/stuck", a.data(), a.data(), DataType::kFloat32, {4}).wait(kWait);
    });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("stall inspector"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("'grad/stuck' (allreduce) submitted by ranks [0], missing ranks [1]"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

}  // namespace
}  // namespace chorus::engine::testing
