// The gradient bucket layout (src/torch/gradient_buckets.h): parameters last to first, one
// dtype per bucket, at most bucket_bytes each unless one parameter is larger, 64-byte
// offsets, no overlap, and the same layout from the same parameters.
#include "torch/gradient_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace chorus::detail {
namespace {

BucketParam f32(size_t elements) { return {elements * 4, DataType::kFloat32}; }

TEST(GradientBuckets, ParametersLastToFirstIntoBucketsOfAtMostTheCap) {
  // A model's parameters as declared: conv weight, conv bias, fc weight, fc bias.
  std::vector<BucketParam> params{f32(800), f32(32), f32(2000), f32(10)};
  BucketLayout l = plan_buckets(params, 8100);
  ASSERT_EQ(l.buckets.size(), 2u);
  // fc bias (40 B at 0) and fc weight (8000 B at 64) fill the first: 8064 <= 8100.
  EXPECT_EQ(l.buckets[0].params, (std::vector<size_t>{3, 2}));
  EXPECT_EQ(l.offset_of[3], 0u);
  EXPECT_EQ(l.offset_of[2], 64u);
  EXPECT_EQ(l.buckets[0].bytes, 8064u);
  // The conv bias would make it 8064 + 128: a new bucket, at a 64-byte boundary.
  EXPECT_EQ(l.buckets[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(l.buckets[1].offset, 8064u);
  EXPECT_EQ(l.offset_of[1], 8064u);
  EXPECT_EQ(l.offset_of[0], 8064u + 128);
  EXPECT_EQ(l.buckets[1].bytes, 128u + 3200);
  EXPECT_EQ(l.total_bytes, 8064u + 128 + 3200);
  EXPECT_EQ(l.bucket_of, (std::vector<int>{1, 1, 0, 0}));
}

TEST(GradientBuckets, ALargerParameterGetsABucketOfItsOwn) {
  BucketLayout l = plan_buckets({f32(10), f32(5000), f32(10)}, 4096);
  ASSERT_EQ(l.buckets.size(), 3u);
  EXPECT_EQ(l.buckets[1].params, (std::vector<size_t>{1}));
  EXPECT_EQ(l.buckets[1].bytes, 20000u);
}

TEST(GradientBuckets, OneDtypePerBucketAndNothingOverlaps) {
  std::vector<BucketParam> params{
      f32(3), {24, DataType::kFloat64}, f32(5), {6, DataType::kFloat16}, f32(7)};
  BucketLayout l = plan_buckets(params, size_t{1} << 20);
  // Last to first, a dtype change closes the bucket: {4} f32, {3} f16, {2} f32, {1} f64, {0}.
  ASSERT_EQ(l.buckets.size(), 5u);
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& b : l.buckets) {
    EXPECT_EQ(b.offset % 64, 0u);
    for (size_t k : b.params) {
      EXPECT_EQ(params[k].dtype, b.dtype) << "parameter " << k;
      EXPECT_EQ(l.offset_of[k] % 64, 0u);
      EXPECT_GE(l.offset_of[k], b.offset);
      EXPECT_LE(l.offset_of[k] + params[k].bytes, b.offset + b.bytes);
      ranges.emplace_back(l.offset_of[k], l.offset_of[k] + params[k].bytes);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  EXPECT_EQ(ranges.size(), params.size());
}

}  // namespace
}  // namespace chorus::detail
