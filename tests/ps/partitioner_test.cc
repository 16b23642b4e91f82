// Partitioners: every element exactly once, balance, round-robin placement, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "chorus/error.h"
#include "chorus/ps/partitioner.h"

namespace chorus::ps {
namespace {

// Every element of every variable in exactly one shard, shards in (variable, offset) order.
void expect_exact_cover(const std::vector<VariableSpec>& vars, const std::vector<Shard>& shards,
                        int num_ps) {
  std::vector<int64_t> next(vars.size(), 0);
  for (const Shard& s : shards) {
    ASSERT_GE(s.variable, 0);
    ASSERT_LT(static_cast<size_t>(s.variable), vars.size());
    EXPECT_GE(s.ps, 0);
    EXPECT_LT(s.ps, num_ps);
    EXPECT_GT(s.length, 0);
    EXPECT_EQ(s.offset, next[s.variable]) << "gap or overlap in variable " << s.variable;
    next[s.variable] = s.offset + s.length;
  }
  for (size_t i = 0; i < vars.size(); ++i) EXPECT_EQ(next[i], vars[i].numel) << vars[i].name;
}

std::vector<VariableSpec> random_variables(std::mt19937& rng, int count) {
  std::vector<VariableSpec> vars;
  std::uniform_int_distribution<int64_t> size(1, 200000);
  for (int i = 0; i < count; ++i) vars.push_back({"v" + std::to_string(i), size(rng)});
  return vars;
}

TEST(RoundRobin, WholeVariablesInTurn) {
  std::vector<VariableSpec> vars = {{"a", 5}, {"b", 1}, {"c", 9}, {"d", 2}, {"e", 3}};
  auto shards = round_robin(vars, 3);
  ASSERT_EQ(shards.size(), vars.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    EXPECT_EQ(shards[i].variable, static_cast<int>(i));
    EXPECT_EQ(shards[i].offset, 0);
    EXPECT_EQ(shards[i].length, vars[i].numel);
    EXPECT_EQ(shards[i].ps, static_cast<int>(i % 3));
  }
  EXPECT_EQ(load_per_ps(shards, 3), (std::vector<int64_t>{5 + 2, 1 + 3, 9}));
}

TEST(SizeBalanced, CoversEveryElementOnceAndBalances) {
  std::mt19937 rng(7);
  for (int num_ps : {1, 2, 3, 5, 8}) {
    for (int64_t max_shard : {int64_t{0}, int64_t{1000}, int64_t{77777}}) {
      auto vars = random_variables(rng, 1 + static_cast<int>(rng() % 20));
      auto shards = size_balanced(vars, num_ps, max_shard);
      expect_exact_cover(vars, shards, num_ps);
      auto load = load_per_ps(shards, num_ps);
      int64_t largest = 0;
      for (const Shard& s : shards) largest = std::max(largest, s.length);
      auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      EXPECT_LE(*hi - *lo, largest) << "num_ps " << num_ps << " max_shard " << max_shard;
      if (max_shard > 0) {
        for (const Shard& s : shards) EXPECT_LE(s.length, max_shard);
      }
      EXPECT_EQ(size_balanced(vars, num_ps, max_shard).size(), shards.size());  // deterministic
    }
  }
}

TEST(SizeBalanced, SplitsIntoNearEqualShards) {
  auto shards = size_balanced({{"big", 10}}, 2, 3);  // 4 shards: 3, 3, 2, 2
  ASSERT_EQ(shards.size(), 4u);
  EXPECT_EQ(shards[0].length, 3);
  EXPECT_EQ(shards[1].length, 3);
  EXPECT_EQ(shards[2].length, 2);
  EXPECT_EQ(shards[3].length, 2);
  // LPT: 3 -> ps0, 3 -> ps1, 2 -> ps0 (tie: lowest index), 2 -> ps1.
  EXPECT_EQ(shards[0].ps, 0);
  EXPECT_EQ(shards[1].ps, 1);
  EXPECT_EQ(shards[2].ps, 0);
  EXPECT_EQ(shards[3].ps, 1);
}

TEST(SizeBalanced, DefaultShardSize) {
  // total / (4 * num_ps) = 100000 / 8 = 12500 < 16384: shards of at most 16384 elements.
  auto shards = size_balanced({{"w", 100000}}, 2);
  for (const Shard& s : shards) EXPECT_LE(s.length, 16384);
  EXPECT_EQ(shards.size(), 7u);  // ceil(100000 / 16384)
  // Large models: total / (4 * num_ps).
  auto big = size_balanced({{"w", 8000000}}, 4);
  EXPECT_EQ(big.size(), 16u);
}

TEST(Partitioners, RejectBadInput) {
  EXPECT_THROW(round_robin({{"a", 1}}, 0), InvalidArgument);
  EXPECT_THROW(size_balanced({{"a", 1}, {"a", 2}}, 2), InvalidArgument);
  EXPECT_THROW(size_balanced({{"", 1}}, 2), InvalidArgument);
  EXPECT_THROW(round_robin({{"a", 0}}, 2), InvalidArgument);
  EXPECT_THROW(load_per_ps({Shard{0, 0, 1, 3}}, 2), InvalidArgument);
  EXPECT_TRUE(round_robin({}, 2).empty());
}

}  // namespace
}  // namespace chorus::ps
