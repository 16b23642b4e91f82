#include "util/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "chorus/error.h"
#include "util/reduce_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace chorus {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = half_to_float(static_cast<uint16_t>(h));
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
    } else {
      EXPECT_EQ(float_to_half(f), h) << std::hex << h;
    }
  }
}

TEST(Half, KnownValuesAndRounding) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(0xfc00)) && half_to_float(0xfc00) < 0);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // halfway to the next binade: Inf
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);             // tie to even (0)
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0f, -26)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14) * 1023 / 1024), 0x03ff);  // largest subnormal
  uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hardware_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

TEST(Half, MatchesHardwareConversionOnRandomFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    float f = from_bits(rng());
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), hardware_half(f)) << std::hexfloat << f;
  }
}
#endif

TEST(BFloat16, RoundTripAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bfloat16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(f))));
    } else {
      EXPECT_EQ(float_to_bfloat16(f), b);
    }
  }
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808000)), 0x3f80);  // tie to even: down
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f818000)), 0x3f82);  // tie to even: up
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(from_bits(0x7f7fffff)), 0x7f80);  // rounds to Inf
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(from_bits(0x7f800001)))));
  EXPECT_EQ(bits(bfloat16_to_float(0x0001)), 0x00010000u);  // subnormals are kept
}

// A scalar model of one element, as double (exact for every integer and float input).
double load(DataType t, const std::vector<char>& buf, size_t i) {
  const char* p = buf.data() + i * dtype_size(t);
  switch (t) {
    case DataType::kUInt8:
      return *reinterpret_cast<const uint8_t*>(p);
    case DataType::kInt8:
      return *reinterpret_cast<const int8_t*>(p);
    case DataType::kInt16:
      return *reinterpret_cast<const int16_t*>(p);
    case DataType::kInt32:
      return *reinterpret_cast<const int32_t*>(p);
    case DataType::kInt64:
      return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case DataType::kFloat16:
      return half_to_float(*reinterpret_cast<const uint16_t*>(p));
    case DataType::kBFloat16:
      return bfloat16_to_float(*reinterpret_cast<const uint16_t*>(p));
    case DataType::kFloat32:
      return *reinterpret_cast<const float*>(p);
    case DataType::kFloat64:
      return *reinterpret_cast<const double*>(p);
  }
  return 0;
}

void store(DataType t, std::vector<char>& buf, size_t i, double v) {
  char* p = buf.data() + i * dtype_size(t);
  switch (t) {
    case DataType::kUInt8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
      break;
    case DataType::kInt16:
      *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(v);
      break;
    case DataType::kInt32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    case DataType::kFloat16:
      *reinterpret_cast<uint16_t*>(p) = float_to_half(float(v));
      break;
    case DataType::kBFloat16:
      *reinterpret_cast<uint16_t*>(p) = float_to_bfloat16(float(v));
      break;
    case DataType::kFloat32:
      *reinterpret_cast<float*>(p) = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      *reinterpret_cast<double*>(p) = v;
      break;
  }
}

// The expected result of one element: the op in double, rounded once to the type (which
// is exactly what per-element float32 arithmetic + one rounding gives for these inputs).
double model(DataType t, ReduceOp op, double a, double b) {
  double r = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      r = a + b;
      break;
    case ReduceOp::kMin:
      r = std::min(a, b);
      break;
    case ReduceOp::kMax:
      r = std::max(a, b);
      break;
    case ReduceOp::kProduct:
      r = a * b;
      break;
    case ReduceOp::kAdasum:  // not element-wise (tests/comm/adasum_test.cc)
      ADD_FAILURE() << "no element-wise model of Adasum";
      break;
  }
  std::vector<char> tmp(8);
  store(t, tmp, 0, t == DataType::kFloat32 || dtype_size(t) == 2 ? double(float(r)) : r);
  return load(t, tmp, 0);
}

void fill(DataType t, std::vector<char>& buf, size_t n, std::mt19937& rng) {
  bool is_float = t >= DataType::kFloat16 && t != DataType::kInt16;
  std::uniform_int_distribution<int> small(t == DataType::kUInt8 ? 0 : -9, 9);
  std::uniform_real_distribution<double> real(-4, 4);
  for (size_t i = 0; i < n; ++i) store(t, buf, i, is_float ? real(rng) : small(rng));
}

class ReduceKernels : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !reduce_detail::avx2_available()) GTEST_SKIP() << "no AVX2";
    reduce_detail::set_avx2_enabled(GetParam());
  }
  void TearDown() override { reduce_detail::set_avx2_enabled(true); }
};

TEST_P(ReduceKernels, IntoAndPairMatchScalarModel) {
  std::mt19937 rng(42);
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    for (int oi = 0; oi < kNumReduceOps; ++oi) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{513}, size_t{4099}}) {
        auto t = static_cast<DataType>(ti);
        auto op = static_cast<ReduceOp>(oi);
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + reduce_op_name(op) +
                     " n=" + std::to_string(n));
        size_t es = dtype_size(t);
        std::vector<char> a((n + 1) * es), b((n + 1) * es), out((n + 1) * es);
        fill(t, a, n + 1, rng);
        fill(t, b, n + 1, rng);
        std::vector<char> acc = a;
        // Offset by one element: kernels must not assume alignment.
        reduce_into(t, op, acc.data() + es, b.data() + es, n);
        reduce_pair(t, op, out.data() + es, a.data() + es, b.data() + es, n);
        std::vector<char> alias_b = b;
        reduce_pair(t, op, alias_b.data() + es, a.data() + es, alias_b.data() + es, n);
        EXPECT_EQ(load(t, acc, 0), load(t, a, 0));  // nothing outside the range touched
        for (size_t i = 1; i <= n; ++i) {
          double want = model(t, op, load(t, a, i), load(t, b, i));
          ASSERT_EQ(load(t, acc, i), want) << "into, element " << i;
          ASSERT_EQ(load(t, out, i), want) << "pair, element " << i;
          ASSERT_EQ(load(t, alias_b, i), want) << "pair out==b, element " << i;
        }
      }
    }
  }
}

TEST_P(ReduceKernels, IntegersWrapInsteadOfOverflowing) {
  int32_t a[3] = {INT32_MAX, INT32_MIN, 1 << 20};
  int32_t b[3] = {1, -1, 1 << 12};
  reduce_into(DataType::kInt32, ReduceOp::kSum, a, b, 2);
  EXPECT_EQ(a[0], INT32_MIN);
  EXPECT_EQ(a[1], INT32_MAX);
  int8_t c[1] = {100}, d[1] = {3};
  reduce_into(DataType::kInt8, ReduceOp::kProduct, c, d, 1);
  EXPECT_EQ(c[0], static_cast<int8_t>(300 - 256));
}

TEST_P(ReduceKernels, HalfSumRoundsOncePerAddition) {
  // 2048 + 1 is a tie in float16 (spacing 2): rounds to even, 2048.
  uint16_t acc[9], in[9];
  for (int i = 0; i < 9; ++i) {
    acc[i] = float_to_half(2048.0f);
    in[i] = float_to_half(i == 8 ? 3.0f : 1.0f);
  }
  reduce_into(DataType::kFloat16, ReduceOp::kSum, acc, in, 9);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(half_to_float(acc[i]), 2048.0f);
  EXPECT_EQ(half_to_float(acc[8]), 2052.0f);  // 2051 ties to even 2052
  // Inf and NaN propagate through the widening.
  uint16_t x[2] = {0x7c00, 0x7e00}, y[2] = {float_to_half(1.0f), float_to_half(1.0f)};
  reduce_into(DataType::kFloat16, ReduceOp::kSum, x, y, 2);
  EXPECT_EQ(x[0], 0x7c00);
  EXPECT_TRUE(std::isnan(half_to_float(x[1])));
}

TEST_P(ReduceKernels, DivideTruncatesIntegersAndRoundsFloats) {
  int32_t i[4] = {7, -7, 8, 0};
  divide(DataType::kInt32, i, 4, 2);
  EXPECT_EQ(i[0], 3);
  EXPECT_EQ(i[1], -3);
  EXPECT_EQ(i[2], 4);
  uint8_t u[1] = {255};
  divide(DataType::kUInt8, u, 1, 300);
  EXPECT_EQ(u[0], 0);
  std::vector<uint16_t> h(1000, float_to_half(3.0f));
  divide(DataType::kFloat16, h.data(), h.size(), 3);
  for (uint16_t v : h) ASSERT_EQ(half_to_float(v), 1.0f);
  std::vector<uint16_t> bf(3, float_to_bfloat16(1.0f));
  divide(DataType::kBFloat16, bf.data(), bf.size(), 4);
  EXPECT_EQ(bfloat16_to_float(bf[2]), 0.25f);
  double d[1] = {1.0};
  divide(DataType::kFloat64, d, 1, 3);
  EXPECT_EQ(d[0], 1.0 / 3.0);
  EXPECT_THROW(divide(DataType::kFloat32, d, 1, 0), InvalidArgument);
}

// The one-pass average must give the bits of the two steps it replaces, for every type and
// op, divisors with and without an exact reciprocal, lengths across its chunks, out == b.
TEST_P(ReduceKernels, PairDividedEqualsPairThenDivide) {
  std::mt19937 rng(7);
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    for (int oi = 0; oi < kNumReduceOps; ++oi) {
      for (int64_t divisor : {1, 2, 3, 4, 7}) {
        auto t = static_cast<DataType>(ti);
        auto op = static_cast<ReduceOp>(oi);
        size_t n = 20000 + 3, es = dtype_size(t);  // over one 16 KiB chunk, odd tail
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + reduce_op_name(op) +
                     " divisor=" + std::to_string(divisor));
        std::vector<char> a(n * es), b(n * es);
        fill(t, a, n, rng);
        fill(t, b, n, rng);
        std::vector<char> want(n * es), got(n * es), alias = b;
        reduce_pair(t, op, want.data(), a.data(), b.data(), n);
        divide(t, want.data(), n, divisor);
        reduce_pair_divided(t, op, got.data(), a.data(), b.data(), n, divisor);
        reduce_pair_divided(t, op, alias.data(), a.data(), alias.data(), n, divisor);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
        ASSERT_EQ(std::memcmp(alias.data(), want.data(), alias.size()), 0);
      }
    }
  }
  float x = 1, y = 2;
  EXPECT_THROW(reduce_pair_divided(DataType::kFloat32, ReduceOp::kSum, &x, &x, &y, 1, 0),
               InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Isa, ReduceKernels, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "avx2" : "generic"; });

TEST(Reduce, RejectsUnknownTypesAndOps) {
  float a = 1, b = 2;
  EXPECT_THROW(reduce_into(static_cast<DataType>(99), ReduceOp::kSum, &a, &b, 1), InvalidArgument);
  EXPECT_THROW(reduce_pair(DataType::kFloat32, static_cast<ReduceOp>(99), &a, &a, &b, 1),
               InvalidArgument);
}

}  // namespace
}  // namespace chorus
