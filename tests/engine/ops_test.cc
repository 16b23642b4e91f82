// Engine results: ranks submitting in different orders, every op kind, fusion on/off,
// the response cache's hit path and its invalidation.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "engine_harness.h"

namespace chorus::engine::testing {
namespace {

// Tensor i of rank r, element j: small integers so float sums are exact.
float value(int r, int i, size_t j) { return static_cast<float>((r + 1) * 3 + i % 7 + j % 5); }

struct Tensors {
  std::vector<std::vector<float>> in, out;
  std::vector<int64_t> sizes;
};

Tensors make_tensors(int rank, int count) {
  Tensors t;
  for (int i = 0; i < count; ++i) {
    int64_t n = 1 + (i * 37) % 300 + (i % 5 == 0 ? 5000 : 0);
    t.sizes.push_back(n);
    t.in.emplace_back(n);
    t.out.emplace_back(n, -1.f);
    for (int64_t j = 0; j < n; ++j) t.in[i][j] = value(rank, i, j);
  }
  return t;
}

// Every rank enqueues `count` sum allreduces in its own random order, then waits for all.
void allreduce_step(Engine& e, int rank, Tensors& t, unsigned seed) {
  std::vector<int> order(t.in.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed * 31 + rank));
  std::vector<Handle> handles(order.size());
  for (int i : order) {
    handles[i] = e.allreduce("t" + std::to_string(i), t.in[i].data(), t.out[i].data(),
                             DataType::kFloat32, {t.sizes[i]});
  }
  for (auto& h : handles) h.wait(kWait);
}

void check_sums(const Tensors& t, int size) {
  for (size_t i = 0; i < t.in.size(); ++i) {
    for (size_t j = 0; j < t.in[i].size(); ++j) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += value(r, static_cast<int>(i), j);
      ASSERT_EQ(t.out[i][j], want) << "tensor " << i << " element " << j;
    }
  }
}

// check_sums, for tensors from make_tensors plus a last one of rank r's 1 + r everywhere.
void check_sums_with_big(const Tensors& t, int size) {
  Tensors small = t;
  small.in.pop_back();
  small.out.pop_back();
  check_sums(small, size);
  float want = static_cast<float>(size * (size + 1) / 2);
  for (float x : t.out.back()) ASSERT_EQ(x, want);
}

TEST(EngineOps, DifferentOrdersAgree) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    Tensors t = make_tensors(r, 24);
    for (unsigned step = 0; step < 3; ++step) {
      allreduce_step(e, r, t, step);
      check_sums(t, 3);
    }
  });
  EXPECT_GT(g[0].stats().collectives, 0u);
}

TEST(EngineOps, FusionOnAndOffGiveIdenticalResults) {
  std::vector<std::vector<std::vector<float>>> results(2);
  for (int fused = 0; fused < 2; ++fused) {
    EngineOptions o = test_options();
    o.fusion_threshold = fused ? size_t{64} << 20 : 0;
    EngineGroup g(2, o);
    g.run([&](int r, Engine& e) {
      Tensors t = make_tensors(r, 16);
      for (auto& v : t.in) {
        for (auto& x : v) x = x / 3.f + 0.1f * static_cast<float>(r);  // inexact values
      }
      std::vector<Handle> hs;
      for (size_t i = 0; i < t.in.size(); ++i) {
        hs.push_back(e.allreduce("f" + std::to_string(i), t.in[i].data(), t.out[i].data(),
                                 DataType::kFloat32, {t.sizes[i]}, ReduceOp::kAverage, 0.5, 3.0));
      }
      for (auto& h : hs) h.wait(kWait);
      if (r == 0) results[fused] = t.out;
    });
    auto s = g[0].stats();
    if (fused) {
      EXPECT_GT(s.fused_tensors, 0u);
    } else {
      EXPECT_EQ(s.fused_tensors, 0u);
    }
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    ASSERT_EQ(0, std::memcmp(results[0][i].data(), results[1][i].data(),
                             results[0][i].size() * sizeof(float)))
        << "tensor " << i;
  }
}

// Through the fusion buffer (TCP: no single copy) only tensors under 128 KiB are copied
// into groups; from 128 KiB a tensor's own collective is cheaper than its two copies.
TEST(EngineOps, StagedGroupsTakeOnlyTensorsUnder128KiB) {
  constexpr size_t kCut = size_t{128} << 10;
  for (size_t bytes : {kCut - 4, kCut}) {
    EngineGroup g(2);
    g.run([&](int r, Engine& e) {
      size_t n = bytes / sizeof(float);
      std::vector<std::vector<float>> t(8, std::vector<float>(n, 1.0f + r));
      for (unsigned step = 0; step < 4; ++step) {
        std::vector<Handle> hs;
        for (size_t i = 0; i < t.size(); ++i) {
          hs.push_back(e.allreduce("s" + std::to_string(i), t[i].data(), t[i].data(),
                                   DataType::kFloat32, {static_cast<int64_t>(n)}));
        }
        for (auto& h : hs) h.wait(kWait);
        for (auto& v : t) ASSERT_EQ(v[n - 1], 3.0f * static_cast<float>(1 << step)) << bytes;
      }
    });
    EXPECT_EQ(g[0].stats().fused_tensors > 0, bytes < kCut) << bytes;
  }
}

// Over shm with single copy, a group is reduced where its tensors lie (no fusion buffer)
// and may hold tensors of up to 128 MiB together, large ones included: the sums are exact,
// and fusion on and off agree bit for bit for an average.
TEST(EngineOps, SingleCopyGroupsReduceTensorsWhereTheyLie) {
  std::vector<std::vector<std::vector<float>>> results(2);
  for (int fused = 0; fused < 2; ++fused) {
    EngineOptions o = test_options();
    o.fusion_threshold = fused ? size_t{4} << 20 : 0;
    EngineGroup g(2, o, Transport::kShm);
    g.run([&](int r, Engine& e) {
      // 1 MiB first: the ranks agree on single copy.
      std::vector<float> big(1 << 18, 1.0f);
      e.allreduce("big", big.data(), big.data(), DataType::kFloat32, {1 << 18}).wait(kWait);
      ASSERT_EQ(big[0], 2.0f);
      ASSERT_TRUE(g.comm(r).single_copy());
      Tensors t = make_tensors(r, 24);
      t.sizes.push_back(3 << 18);  // 3 MiB: alone in place before, grouped now
      t.in.emplace_back(3 << 18, 1.0f + r);
      t.out.emplace_back(3 << 18, -1.0f);
      allreduce_step(e, r, t, 5);
      check_sums_with_big(t, 2);
      std::vector<Handle> hs;
      for (size_t i = 0; i < t.in.size(); ++i) {
        for (auto& x : t.in[i]) x = x / 3.f + 0.1f * static_cast<float>(r);  // inexact
        hs.push_back(e.allreduce("a" + std::to_string(i), t.in[i].data(), t.out[i].data(),
                                 DataType::kFloat32, {t.sizes[i]}, ReduceOp::kAverage));
      }
      for (auto& h : hs) h.wait(kWait);
      if (r == 0) results[fused] = t.out;
    });
    auto s = g[0].stats();
    if (fused) {
      // Every group (all after the agreement) was reduced where its tensors lie.
      EXPECT_GE(s.fused_tensors, 2u);
      EXPECT_EQ(s.fused_in_place, s.fused_tensors);
    } else {
      EXPECT_EQ(s.fused_tensors, 0u);
    }
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    ASSERT_EQ(0, std::memcmp(results[0][i].data(), results[1][i].data(),
                             results[0][i].size() * sizeof(float)))
        << "tensor " << i;
  }
}

TEST(EngineOps, ResponseCacheHitsAndInvalidation) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    Tensors t = make_tensors(r, 8);
    for (unsigned step = 0; step < 5; ++step) allreduce_step(e, r, t, step);
    check_sums(t, 2);
    auto s = e.stats();
    EXPECT_GE(s.cache_hits, 8u * 3) << "steps after the first should agree through the cache";
    // Every op counted once, with its bytes (what chorusrun --dashboard shows as rates).
    EXPECT_EQ(s.ops, 8u * 5);
    uint64_t bytes = 0;
    for (int64_t n : t.sizes) bytes += static_cast<uint64_t>(n) * sizeof(float) * 5;
    EXPECT_EQ(s.op_bytes, bytes);
    // Both ranks have read their counters before either changes a shape (an invalidation
    // reaches every rank's counters).
    e.barrier("counters read").wait(kWait);
    // A changed shape invalidates the entry on every rank and renegotiates.
    std::vector<float> in(10, static_cast<float>(r + 1)), out(10);
    auto h = e.allreduce("t3", in.data(), out.data(), DataType::kFloat32, {2, 5});
    h.wait(kWait);
    EXPECT_EQ(out[9], 3.f);
    auto after = e.stats();
    EXPECT_GT(after.cache_invalidations, s.cache_invalidations);
    EXPECT_GT(after.full_negotiations, s.full_negotiations);
  });
}

TEST(EngineOps, SteadyStateSkipsFullNegotiation) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    Tensors t = make_tensors(r, 8);
    for (unsigned step = 0; step < 3; ++step) allreduce_step(e, r, t, step);
    auto before = e.stats().full_negotiations;
    for (unsigned step = 0; step < 5; ++step) allreduce_step(e, r, t, step);
    EXPECT_EQ(e.stats().full_negotiations, before);
  });
}

// An engine with nothing to do, or waiting for a rank that has not enqueued yet, must not
// negotiate every cycle_time (1 ms here): on a host whose cores also train the model those
// empty allreduces cost the model its CPU. Over 300 ms that would be about 300 cycles.
TEST(EngineOps, IdleAndWaitingEnginesDoNotCycleEveryCycleTime) {
  EngineGroup g(2);
  constexpr auto kPause = std::chrono::milliseconds(300);
  constexpr uint64_t kMaxCycles = 60;  // the idle tick is 20 ms: about 15 expected
  g.run([&](int r, Engine& e) {
    e.barrier("warm up").wait(kWait);
    uint64_t before = e.stats().cycles;
    std::this_thread::sleep_for(kPause);
    EXPECT_LE(e.stats().cycles - before, kMaxCycles) << "rank " << r << " while idle";
    e.barrier("idle measured").wait(kWait);

    // Rank 0 enqueues at once, rank 1 only after the pause: rank 0 waits on rank 1.
    before = e.stats().cycles;
    if (r == 1) std::this_thread::sleep_for(kPause);
    float in = static_cast<float>(r + 1), out = 0;
    e.allreduce("late", &in, &out, DataType::kFloat32, {1}).wait(kWait);
    EXPECT_EQ(out, 3.f);
    if (r == 0) {
      EXPECT_LE(e.stats().cycles - before, kMaxCycles) << "rank 0 while waiting";
    }
  });
}

TEST(EngineOps, AllgatherWithDifferentFirstDims) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    std::vector<int32_t> in((r + 1) * 2, r);  // shape [r + 1, 2]
    auto h = e.allgather("ag", in.data(), DataType::kInt32, {r + 1, 2});
    h.wait(kWait);
    EXPECT_EQ(h.shape(), (std::vector<int64_t>{6, 2}));
    ASSERT_EQ(h.bytes(), 12 * sizeof(int32_t));
    auto* out = static_cast<const int32_t*>(h.data());
    std::vector<int32_t> want{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    EXPECT_EQ(std::vector<int32_t>(out, out + 12), want);
  });
}

TEST(EngineOps, BroadcastAlltoallReduceScatterBarrier) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    std::vector<double> b(4, r == 1 ? 7.5 : 0.0);
    auto hb = e.broadcast("bc", b.data(), DataType::kFloat64, {4}, 1);
    // alltoall: rank 0 sends 1 row to 0 and 2 rows to 1; rank 1 sends 3 rows to 0, 0 to 1.
    std::vector<int64_t> splits = r == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{3, 0};
    std::vector<float> a(3 * 2);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r * 100 + i);
    auto ha = e.alltoall("a2a", a.data(), DataType::kFloat32, {3, 2}, splits);
    std::vector<float> rs(5, static_cast<float>(r + 1));  // average over 2 ranks = 1.5
    auto hr = e.reduce_scatter("rs", rs.data(), DataType::kFloat32, {5}, ReduceOp::kAverage);
    auto hbar = e.barrier();
    for (auto* h : {&hb, &ha, &hr, &hbar}) h->wait(kWait);
    EXPECT_EQ(b, std::vector<double>(4, 7.5));
    auto* ao = static_cast<const float*>(ha.data());
    if (r == 0) {
      EXPECT_EQ(ha.received_splits(), (std::vector<int64_t>{1, 3}));
      EXPECT_EQ(std::vector<float>(ao, ao + 8),
                (std::vector<float>{0, 1, 100, 101, 102, 103, 104, 105}));
    } else {
      EXPECT_EQ(ha.received_splits(), (std::vector<int64_t>{2, 0}));
      EXPECT_EQ(std::vector<float>(ao, ao + 4), (std::vector<float>{2, 3, 4, 5}));
    }
    EXPECT_EQ(hr.shape(), (std::vector<int64_t>{r == 0 ? 3 : 2}));
    auto* ro = static_cast<const float*>(hr.data());
    for (int64_t i = 0; i < hr.shape()[0]; ++i) EXPECT_EQ(ro[i], 1.5f);
  });
}

// With every rank contributing and no scale factors the communicator divides as it writes
// the result: exactly sum / 3 in float (one rounding), fused or not, in place or not.
TEST(EngineOps, AverageOverEveryRankIsTheSumDividedOnce) {
  for (size_t threshold : {size_t{0}, size_t{64} << 20}) {
    EngineOptions o = test_options();
    o.fusion_threshold = threshold;
    EngineGroup g(3, o);
    g.run([&](int r, Engine& e) {
      Tensors t = make_tensors(r, 12);
      std::vector<Handle> hs;
      for (size_t i = 0; i < t.in.size(); ++i) {
        void* out = i % 2 == 0 ? t.in[i].data() : t.out[i].data();
        hs.push_back(e.allreduce("avg" + std::to_string(i), t.in[i].data(), out, DataType::kFloat32,
                                 {t.sizes[i]}, ReduceOp::kAverage));
      }
      for (auto& h : hs) h.wait(kWait);
      for (size_t i = 0; i < t.in.size(); ++i) {
        const auto& got = i % 2 == 0 ? t.in[i] : t.out[i];
        for (size_t j = 0; j < got.size(); ++j) {
          float sum = 0;
          for (int q = 0; q < 3; ++q) sum += value(q, static_cast<int>(i), j);
          ASSERT_EQ(got[j], sum / 3.f) << "threshold " << threshold << " tensor " << i;
        }
      }
    });
    EXPECT_EQ(g[0].stats().fused_tensors > 0, threshold > 0);
  }
}

TEST(EngineOps, ReduceOpsAndScaleFactors) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    std::vector<int32_t> mx{r, 10 - r}, mn{r, 10 - r}, prod{r + 2, 3};
    auto h1 = e.allreduce("max", mx.data(), mx.data(), DataType::kInt32, {2}, ReduceOp::kMax);
    auto h2 = e.allreduce("min", mn.data(), mn.data(), DataType::kInt32, {2}, ReduceOp::kMin);
    auto h3 =
        e.allreduce("prod", prod.data(), prod.data(), DataType::kInt32, {2}, ReduceOp::kProduct);
    std::vector<float> s{1.f + r, 2.f};
    // (1*2 + 2*2) * 0.25 = 1.5; (2*2 + 2*2) * 0.25 = 2
    auto h4 = e.allreduce("scaled", s.data(), s.data(), DataType::kFloat32, {2}, ReduceOp::kSum,
                          2.0, 0.25);
    for (auto* h : {&h1, &h2, &h3, &h4}) h->wait(kWait);
    EXPECT_EQ(mx, (std::vector<int32_t>{1, 10}));
    EXPECT_EQ(mn, (std::vector<int32_t>{0, 9}));
    EXPECT_EQ(prod, (std::vector<int32_t>{6, 9}));
    EXPECT_EQ(s, (std::vector<float>{1.5f, 2.f}));
  });
}

// Adasum combines each tensor as a vector of its own, also when several are in flight at
// once and fused: orthogonal tensors add up, parallel ones average, and Adasum(2x) =
// 2 Adasum(x) carries the prescale.
TEST(EngineOps, AdasumCombinesEachTensorOnItsOwn) {
  EngineGroup g(4);
  g.run([&](int r, Engine& e) {
    std::vector<double> axis(4, 0.0), along = {1.0 * (r + 1), -2.0 * (r + 1), 0.5 * (r + 1)};
    axis[r] = r + 1.0;
    std::vector<double> scaled = along;
    auto h1 =
        e.allreduce("axis", axis.data(), axis.data(), DataType::kFloat64, {4}, ReduceOp::kAdasum);
    auto h2 = e.allreduce("along", along.data(), along.data(), DataType::kFloat64, {3},
                          ReduceOp::kAdasum);
    auto h3 = e.allreduce("scaled", scaled.data(), scaled.data(), DataType::kFloat64, {3},
                          ReduceOp::kAdasum, 2.0, 1.0);
    for (auto* h : {&h1, &h2, &h3}) h->wait(kWait);
    const std::vector<double> sum = {1, 2, 3, 4}, mean = {2.5, -5.0, 1.25};
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(axis[i], sum[i], 1e-12);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(along[i], mean[i], 1e-12);
      EXPECT_NEAR(scaled[i], 2 * mean[i], 1e-12);
    }
    std::vector<int32_t> ints(2, 1);
    EXPECT_NE(error_of<InvalidArgument>([&] {
                e.allreduce("ints", ints.data(), ints.data(), DataType::kInt32, {2},
                            ReduceOp::kAdasum);
              }).find("allreduce 'ints': Adasum combines floating-point tensors, not int32"),
              std::string::npos);
    EXPECT_NE(error_of<InvalidArgument>([&] {
                e.reduce_scatter("rs", along.data(), DataType::kFloat64, {3}, ReduceOp::kAdasum);
              }).find("reduce_scatter 'rs': Adasum runs in allreduce only"),
              std::string::npos);
  });
  EXPECT_GT(g[0].stats().fused_tensors, 0u);  // "axis" and "along" ran as one collective
  EngineGroup three(3);
  three.run([&](int, Engine& e) {
    std::vector<float> x(2, 1.f);
    EXPECT_NE(error_of<InvalidArgument>([&] {
                e.allreduce("x", x.data(), x.data(), DataType::kFloat32, {2}, ReduceOp::kAdasum);
              })
                  .find("Adasum needs a power-of-two number of ranks (it combines them pairwise), "
                        "not 3"),
              std::string::npos);
  });
}

// The engine thread runs as "chorus-engine" under SCHED_BATCH, so that enqueueing never
// hands the caller's core to it (util/background_thread.h): its name and policy as the
// kernel reports them, for each of the group's engines.
TEST(EngineOps, EngineThreadsAreNamedBatchThreads) {
  EngineGroup g(2);
  g.run([&](int, Engine& e) { e.barrier("started").wait(kWait); });
  int engines = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    if (name != "chorus-engine") continue;
    ++engines;
    pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    EXPECT_EQ(sched_getscheduler(tid), SCHED_BATCH) << "thread " << tid;
  }
  EXPECT_EQ(engines, 2);
}

}  // namespace
}  // namespace chorus::engine::testing
