// DistributedSampler: coverage per epoch across ranks, padding and drop_last, reshuffling.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "chorus/error.h"
#include "chorus/torch/sampler.h"

namespace chorus {
namespace {

std::map<int64_t, int> counts(int64_t n, int ranks, int64_t epoch, DistributedSamplerOptions o) {
  std::map<int64_t, int> c;
  int64_t per_rank = -1;
  for (int r = 0; r < ranks; ++r) {
    DistributedSampler s(n, ranks, r, o);
    s.set_epoch(epoch);
    auto idx = s.indices();
    EXPECT_EQ(static_cast<int64_t>(idx.size()), s.num_samples());
    if (per_rank >= 0) {
      EXPECT_EQ(static_cast<int64_t>(idx.size()), per_rank) << "uneven steps";
    }
    per_rank = static_cast<int64_t>(idx.size());
    for (int64_t i : idx) {
      EXPECT_TRUE(i >= 0 && i < n);
      ++c[i];
    }
  }
  return c;
}

TEST(DistributedSampler, EverySampleExactlyOncePerEpochWhenRanksDivide) {
  for (int64_t epoch : {0, 1, 7}) {
    auto c = counts(12, 3, epoch, {});
    EXPECT_EQ(c.size(), 12u);
    for (auto& [i, k] : c) EXPECT_EQ(k, 1) << "sample " << i << " epoch " << epoch;
  }
}

TEST(DistributedSampler, PaddingRepeatsFewSamplesAndDropLastDropsThem) {
  auto padded = counts(10, 4, 3, {});  // 12 slots: every sample once, 2 of them twice
  EXPECT_EQ(padded.size(), 10u);
  int twice = 0;
  for (auto& [i, k] : padded) twice += k == 2;
  EXPECT_EQ(twice, 2);
  DistributedSamplerOptions o;
  o.drop_last = true;
  auto dropped = counts(10, 4, 3, o);  // 8 slots: 8 distinct samples
  EXPECT_EQ(dropped.size(), 8u);
  for (auto& [i, k] : dropped) EXPECT_EQ(k, 1);
  // Fewer samples than ranks still gives every rank a step.
  EXPECT_EQ(DistributedSampler(2, 4, 3).num_samples(), 1);
}

TEST(DistributedSampler, ReshufflesPerEpochDeterministically) {
  DistributedSampler a(1000, 2, 0), b(1000, 2, 0);
  a.set_epoch(1);
  b.set_epoch(1);
  EXPECT_EQ(a.indices(), b.indices());
  b.set_epoch(2);
  EXPECT_NE(a.indices(), b.indices());
  DistributedSamplerOptions seeded;
  seeded.seed = 5;
  DistributedSampler c(1000, 2, 0, seeded);
  c.set_epoch(1);
  EXPECT_NE(a.indices(), c.indices());
  DistributedSamplerOptions plain;
  plain.shuffle = false;
  auto in_order = DistributedSampler(6, 2, 1, plain).indices();
  EXPECT_EQ(in_order, (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(DistributedSampler(130, 2, 0).num_batches(64, false), 2);
  EXPECT_EQ(DistributedSampler(130, 2, 0).num_batches(64, true), 1);
  EXPECT_THROW(DistributedSampler(10, 2, 2), InvalidArgument);
}

}  // namespace
}  // namespace chorus
