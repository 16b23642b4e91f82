// BatchBalancer: the split of a global batch by rate (sums, proportions, the least share,
// rounding, fallbacks), and over real engines (ranks as threads, loopback TCP): identical
// shares on every rank that tile the batch, shares that follow the recorded times one step
// later, ranks that split different batches, errors by type and message. No libtorch
// here; the gradient through uneven shares is tested in optimizer_test.cc.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "chorus/error.h"
#include "chorus/torch/batch_balancer.h"
#include "engine_harness.h"

namespace chorus {
namespace {

using engine::testing::EngineGroup;
using engine::testing::error_of;

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

TEST(BalancedRows, ProportionalToRatesAndSumToTheBatch) {
  EXPECT_EQ(balanced_rows({1, 1}, 128, 0.5), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(balanced_rows({3, 1}, 128, 0.5), (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(balanced_rows({1.2, 1.0}, 128, 0.5), (std::vector<int64_t>{70, 58}));  // 69.8, 58.2
  EXPECT_EQ(balanced_rows({1, 2, 1}, 100, 0.5), (std::vector<int64_t>{25, 50, 25}));
  for (int64_t rows : {3, 7, 64, 127, 1000}) {
    for (auto rates : {std::vector<double>{1, 1, 1}, {5, 1, 0.3}, {0.01, 100, 7}}) {
      auto out = balanced_rows(rates, rows, 0.25);
      EXPECT_EQ(sum(out), rows);
      for (int64_t n : out) EXPECT_GE(n, 1);
    }
  }
}

TEST(BalancedRows, RemaindersGoToTheLargestFractionsThenTheLowerRank) {
  EXPECT_EQ(balanced_rows({1, 1}, 7, 0.5), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(balanced_rows({1, 1, 1}, 8, 0.5), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(balanced_rows({1, 2}, 10, 0.5), (std::vector<int64_t>{3, 7}));  // 3.33, 6.67
}

TEST(BalancedRows, NoRankBelowTheLeastShare) {
  // 64 rows, 2 ranks, min_share 0.5: at least 16 each however slow.
  EXPECT_EQ(balanced_rows({100, 1}, 64, 0.5), (std::vector<int64_t>{48, 16}));
  // Three ranks: the slow one pinned at 10, the other two share 50 as 2:1 (33.3, 16.7).
  EXPECT_EQ(balanced_rows({1000, 500, 1}, 60, 0.5), (std::vector<int64_t>{33, 17, 10}));
  EXPECT_EQ(balanced_rows({1000, 1}, 4, 0.1), (std::vector<int64_t>{3, 1}));  // at least 1
  EXPECT_EQ(balanced_rows({1, 9}, 64, 1.0), (std::vector<int64_t>{32, 32}));  // no balancing
}

TEST(BalancedRows, EvenWhenARateIsUnusable) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {0.0, -1.0, nan, inf}) {
    EXPECT_EQ(balanced_rows({3, bad, 1}, 10, 0.5), (std::vector<int64_t>{4, 3, 3})) << bad;
  }
}

TEST(BalancedRows, FewerRowsThanRanksIsAnError) {
  std::string err = error_of<InvalidArgument>([] { balanced_rows({1, 1, 1}, 2, 0.5); });
  EXPECT_NE(err.find("2 rows cannot give each of 3 ranks one"), std::string::npos) << err;
}

TEST(BatchBalancer, SharesTileTheBatchAndFollowTheLastStepsTimes) {
  EngineGroup g(3);
  std::vector<std::vector<BatchShare>> seen(3);
  g.run([&](int r, Engine& e) {
    BatchBalancerOptions o;
    o.engine = &e;
    o.min_share = 0.25;
    BatchBalancer b(o);
    // Step 1: even. Rank 2 then reports 3x the time of the others for its 40 rows.
    BatchShare s = b.next(120);
    seen[r].push_back(s);
    b.record(r == 2 ? 0.3 : 0.1);
    // Step 2 (a smaller batch, as an epoch's last): rates 400, 400, 133.3 -> 3:3:1.
    s = b.next(70);
    seen[r].push_back(s);
    EXPECT_EQ(b.last_rows(), (std::vector<int64_t>{30, 30, 10}));
    b.record(0.1);
    s = b.next(120);  // rates 300, 300, 100: 51.4, 51.4, 17.1
    seen[r].push_back(s);
    b.record(0.1);
  });
  const std::vector<std::vector<int64_t>> want = {{40, 40, 40}, {30, 30, 10}, {52, 51, 17}};
  const int64_t rows[] = {120, 70, 120};
  for (size_t step = 0; step < 3; ++step) {
    int64_t at = 0;
    for (int r = 0; r < 3; ++r) {
      const BatchShare& s = seen[r][step];
      EXPECT_EQ(s.begin, at) << "step " << step << " rank " << r;
      EXPECT_EQ(s.rows(), want[step][r]) << "step " << step << " rank " << r;
      EXPECT_DOUBLE_EQ(s.loss_scale, 3.0 * static_cast<double>(s.rows()) / rows[step]);
      at = s.end;
    }
    EXPECT_EQ(at, rows[step]);
  }
}

TEST(BatchBalancer, RanksSplittingDifferentBatchesFailOnEveryRankAtTheNextStep) {
  EngineGroup g(2);
  std::vector<std::string> errors(2);
  g.run([&](int r, Engine& e) {
    BatchBalancerOptions o;
    o.engine = &e;
    BatchBalancer b(o);
    b.next(r == 0 ? 10 : 12);
    b.record(0.1);
    errors[r] = error_of<InvalidArgument>([&] { b.next(10); });
  });
  EXPECT_NE(errors[0].find("split different global batches in the last step: rank 0 had 10 "
                           "rows, rank 1 had 12"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("rank 1 had 12 rows, rank 0 had 10"), std::string::npos) << errors[1];
}

TEST(BatchBalancer, MisuseIsAnInvalidArgument) {
  EngineGroup g(1);
  g.run([&](int, Engine& e) {
    BatchBalancerOptions o;
    o.engine = &e;
    std::string err = error_of<InvalidArgument>([&] {
      BatchBalancer b(o);
      b.record(0.1);
    });
    EXPECT_NE(err.find("record() without next()"), std::string::npos) << err;
    BatchBalancer b(o);
    b.next(8);
    err = error_of<InvalidArgument>([&] { b.next(8); });
    EXPECT_NE(err.find("next() twice without record()"), std::string::npos) << err;
    err = error_of<InvalidArgument>([&] { b.record(-1); });
    EXPECT_NE(err.find("seconds must be finite and not negative, got -1"), std::string::npos)
        << err;
    b.record(0.01);
    EXPECT_EQ(b.next(8).rows(), 8);
    b.record(0);
    o.min_share = 0;
    err = error_of<InvalidArgument>([&] { BatchBalancer bad(o); });
    EXPECT_NE(err.find("min_share must be in (0, 1], got 0"), std::string::npos) << err;
  });
}

}  // namespace
}  // namespace chorus
