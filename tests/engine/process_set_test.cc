// Process sets: agreement on every rank, ops within sets, sets that run at the same time
// without waiting on each other, removal, and Horovod's join mode.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine_harness.h"

namespace chorus::engine::testing {
namespace {

float sum_allreduce(Engine& e, const std::string& name, float value) {
  float v = value;
  e.allreduce(name, &v, &v, DataType::kFloat32, {1}).wait(kWait);
  return v;
}

TEST(ProcessSets, MembersReduceAmongThemselvesWithSetRanks) {
  EngineGroup g(4);
  g.run([&](int r, Engine& e) {
    auto even = e.add_process_set({2, 0});  // any order; kept ascending
    auto odd = e.add_process_set({1, 3});
    EXPECT_EQ(even->id(), 1);
    EXPECT_EQ(odd->id(), 2);
    EXPECT_EQ(even->ranks(), (std::vector<int>{0, 2}));
    auto& mine = r % 2 == 0 ? *even : *odd;
    auto& other = r % 2 == 0 ? *odd : *even;
    EXPECT_TRUE(mine.included());
    EXPECT_FALSE(other.included());
    EXPECT_EQ(mine.rank(), r / 2);
    EXPECT_EQ(other.rank(), -1);
    EXPECT_EQ(mine.rank_of(r), r / 2);
    EXPECT_EQ(mine.engine().size(), 2);
    EXPECT_EQ(mine.engine().rank(), r / 2);
    // Both sets use the same name at once; each sums its own members' values.
    float want = r % 2 == 0 ? 0.0f + 2.0f : 1.0f + 3.0f;
    EXPECT_EQ(sum_allreduce(mine.engine(), "x", static_cast<float>(r)), want);
    // Set ranks number the roots and the allgather order.
    std::vector<int32_t> b(3, r);
    mine.engine().broadcast("b", b.data(), DataType::kInt32, {3}, 1).wait(kWait);
    EXPECT_EQ(b[0], mine.ranks()[1]);
    std::string m = error_of<InvalidArgument>([&] { other.engine(); });
    EXPECT_NE(m.find("is not in process set " + std::to_string(other.id())), std::string::npos)
        << m;
    // The whole group is set 0, the engine itself.
    EXPECT_EQ(&e.process_set(0)->engine(), &e);
    EXPECT_EQ(e.process_sets().size(), 3u);
    EXPECT_EQ(e.process_set(7), nullptr);
  });
}

// Ranks 1 and 2 each belong to two sets and submit to them in opposite orders; rank 3's set
// waits on nobody outside it. With one engine per set nothing waits for another set.
TEST(ProcessSets, OverlappingAndDisjointSetsRunConcurrently) {
  EngineGroup g(4);
  g.run([&](int r, Engine& e) {
    auto a = e.add_process_set({0, 1});
    auto b = e.add_process_set({1, 2});
    auto c = e.add_process_set({2, 3});
    std::vector<std::pair<ProcessSet*, Handle>> pending;
    std::vector<float> v(3, 1.0f);
    auto submit = [&](ProcessSet& s, int i) {
      pending.emplace_back(&s, s.engine().allreduce("t", &v[i], &v[i], DataType::kFloat32, {1}));
    };
    if (r == 0) submit(*a, 0);
    if (r == 1) submit(*b, 1), submit(*a, 0);
    if (r == 2) submit(*b, 1), submit(*c, 2);
    if (r == 3) submit(*c, 2);
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) it->second.wait(kWait);
    for (auto& [set, h] : pending) {
      (void)set;
      EXPECT_TRUE(h.poll());
    }
    if (r == 1) {
      EXPECT_EQ(v[0] + v[1], 4.0f);
    }
  });
}

TEST(ProcessSets, ASlowSetDoesNotHoldBackAnother) {
  EngineGroup g(4);
  g.run([&](int r, Engine& e) {
    auto slow = e.add_process_set({0, 1});
    auto fast = e.add_process_set({2, 3});
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    auto start = std::chrono::steady_clock::now();
    auto& mine = r < 2 ? *slow : *fast;
    EXPECT_EQ(sum_allreduce(mine.engine(), "s", 1.0f), 2.0f);
    auto took = std::chrono::steady_clock::now() - start;
    // Rank 2 and 3 do not wait for rank 1's sleep (generous bound: a hang guard, not speed).
    if (r >= 2) {
      EXPECT_LT(took, std::chrono::milliseconds(1200)) << "rank " << r;
    }
    // The parent still works beside the sets.
    EXPECT_EQ(sum_allreduce(e, "all", 1.0f), 4.0f);
  });
}

TEST(ProcessSets, DisagreementIsAnErrorOnEveryRank) {
  EngineGroup g(3);
  std::vector<std::string> errors(3);
  g.run([&](int r, Engine& e) {
    errors[r] = error_of<InvalidArgument>([&] {
      e.add_process_set(r == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1});
    });
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("the ranks differ between ranks: rank 0 passed [0, 1], rank 2 passed "
                             "[0, 2]"),
              std::string::npos)
        << errors[r];
  }
  g.run([&](int r, Engine& e) {
    errors[r] = error_of<InvalidArgument>([&] {
      e.add_process_set(r == 1 ? std::vector<int>{0, 5} : std::vector<int>{0, 1});
    });
  });
  EXPECT_NE(errors[1].find("rank 5 is out of range [0, 3)"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("rank 1 passed an invalid rank list"), std::string::npos) << errors[0];
  g.run([&](int r, Engine& e) {
    e.add_process_set({0, 1});
    errors[r] = error_of<InvalidArgument>([&] { e.add_process_set({1, 0}); });
    EXPECT_NE(errors[r].find("process set 1 has the ranks [0, 1] already"), std::string::npos)
        << errors[r];
    errors[r] = error_of<InvalidArgument>([&] { e.add_process_set({0, 1, 2}); });
    EXPECT_NE(errors[r].find("is every rank"), std::string::npos) << errors[r];
    errors[r] = error_of<InvalidArgument>([&] { e.add_process_set({1, 1}); });
    EXPECT_NE(errors[r].find("rank 1 is listed twice"), std::string::npos) << errors[r];
    // After the failures the next set still gets the next id, on every rank alike.
    EXPECT_EQ(e.add_process_set({1, 2})->id(), 2);
  });
}

TEST(ProcessSets, RemovalShutsTheSetDownAndFreesItsRanks) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    auto set = e.add_process_set({0, 2});
    if (set->included()) {
      EXPECT_EQ(sum_allreduce(set->engine(), "x", 1.0f), 2.0f);
    }
    e.remove_process_set(set->id());
    EXPECT_TRUE(set->removed());
    EXPECT_EQ(e.process_set(set->id()), nullptr);
    std::string m = error_of<InvalidArgument>([&] { set->engine(); });
    EXPECT_NE(m.find("process set 1 was removed"), std::string::npos) << m;
    m = error_of<InvalidArgument>([&] { e.remove_process_set(0); });
    EXPECT_NE(m.find("process set 0 (every rank) cannot be removed"), std::string::npos) << m;
    m = error_of<InvalidArgument>([&] { e.remove_process_set(r == 0 ? 1 : 2); });
    EXPECT_NE(m.find("the ids differ between ranks: rank 0 passed 1, rank 1 passed 2"),
              std::string::npos)
        << m;
    // The same ranks may form a set again, under a new id.
    auto again = e.add_process_set({0, 2});
    EXPECT_EQ(again->id(), 2);
    if (again->included()) {
      EXPECT_EQ(sum_allreduce(again->engine(), "x", 2.0f), 4.0f);
    }
  });
}

TEST(ProcessSets, PendingOpsFailWhenTheSetIsRemoved) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    auto solo = e.add_process_set({2});
    if (r == 2) {
      EXPECT_EQ(sum_allreduce(solo->engine(), "solo", 3.0f), 3.0f);
    }
    auto pair = e.add_process_set({0, 1});
    float v = 1;
    Handle h;
    if (r == 0) h = pair->engine().allreduce("only0", &v, &v, DataType::kFloat32, {1});
    e.remove_process_set(pair->id());
    if (r == 0) {
      std::string m = error_of<IoError>([&] { h.wait(kWait); });
      EXPECT_NE(m.find("engine shut down"), std::string::npos) << m;
    }
  });
}

TEST(ProcessSets, ParentShutdownStopsEverySet) {
  EngineGroup g(2);
  std::vector<std::shared_ptr<ProcessSet>> sets(2);
  g.run([&](int r, Engine& e) { sets[r] = e.add_process_set({0}); });
  g.stop();
  std::string m = error_of<InvalidArgument>([&] { sets[0]->engine(); });
  EXPECT_NE(m.find("was removed"), std::string::npos) << m;
}

TEST(ProcessSets, CommunicatorsWithoutAStoreCannotSplit) {
  EngineGroup g(2, test_options(), Transport::kSocketpair);
  g.run([&](int r, Engine& e) {
    std::string m = error_of<InvalidArgument>([&] { e.add_process_set({0}); });
    if (r == 0) {
      EXPECT_NE(m.find("not created through a store"), std::string::npos) << m;
    }
  });
}

// JoinMode::kHorovod: averages divide by every rank, and only allreduce and barrier run
// while a rank has joined.
TEST(EngineJoinModes, HorovodJoinDividesByEveryRankAndRefusesOtherOps) {
  EngineOptions o = test_options();
  o.join_mode = JoinMode::kHorovod;
  EngineGroup g(3, o);
  g.run([&](int r, Engine& e) {
    if (r == 0) {
      EXPECT_EQ(e.join(kWait), 2);
      return;
    }
    std::vector<int32_t> iv(4, 7);
    std::vector<float> fv(4, 3.0f);
    auto hi = e.allreduce("i", iv.data(), iv.data(), DataType::kInt32, {4}, ReduceOp::kAverage);
    auto hf = e.allreduce("f", fv.data(), fv.data(), DataType::kFloat32, {4}, ReduceOp::kAverage);
    hi.wait(kWait);
    hf.wait(kWait);
    EXPECT_EQ(iv[3], 14 / 3);  // (7 + 7 + 0) / 3, truncated
    EXPECT_FLOAT_EQ(fv[3], 2.0f);
    std::vector<float> x(3, 1.0f);
    std::string m = error_of<InvalidArgument>(
        [&] { e.allgather("g", x.data(), DataType::kFloat32, {3}).wait(kWait); });
    EXPECT_NE(m.find("allgather 'g' cannot run while ranks have joined"), std::string::npos) << m;
    m = error_of<InvalidArgument>(
        [&] { e.broadcast("b", x.data(), DataType::kFloat32, {3}, 1).wait(kWait); });
    EXPECT_NE(m.find("broadcast 'b' cannot run while ranks have joined"), std::string::npos) << m;
    EXPECT_EQ(e.join(kWait), 2);
  });
}

}  // namespace
}  // namespace chorus::engine::testing
