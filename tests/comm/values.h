// Typed element access and an independent reference for reductions: floats in float64,
// integers exactly in 64-bit modular arithmetic (what two's-complement wrapping gives).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "chorus/dtype.h"
#include "comm_harness.h"
#include "util/reduce.h"

namespace chorus::comm::testing {

inline bool is_float(DataType t) { return t >= DataType::kFloat16 && t != DataType::kInt16; }

inline int64_t get_int(DataType t, const char* p, size_t i) {
  switch (t) {
    case DataType::kUInt8:
      return reinterpret_cast<const uint8_t*>(p)[i];
    case DataType::kInt8:
      return reinterpret_cast<const int8_t*>(p)[i];
    case DataType::kInt16:
      return reinterpret_cast<const int16_t*>(p)[i];
    case DataType::kInt32:
      return reinterpret_cast<const int32_t*>(p)[i];
    default:
      return reinterpret_cast<const int64_t*>(p)[i];
  }
}

// Truncates like a cast to the element type, and returns the value read back.
inline int64_t set_int(DataType t, char* p, size_t i, uint64_t v) {
  switch (t) {
    case DataType::kUInt8:
      return reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
    case DataType::kInt8:
      return reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
    case DataType::kInt16:
      return reinterpret_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
    case DataType::kInt32:
      return reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
    default:
      return reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
  }
}

inline double get_float(DataType t, const char* p, size_t i) {
  switch (t) {
    case DataType::kFloat16:
      return half_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return bfloat16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat32:
      return reinterpret_cast<const float*>(p)[i];
    default:
      return reinterpret_cast<const double*>(p)[i];
  }
}

inline void set_float(DataType t, char* p, size_t i, double v) {
  switch (t) {
    case DataType::kFloat16:
      reinterpret_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      reinterpret_cast<uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    default:
      reinterpret_cast<double*>(p)[i] = v;
      break;
  }
}

// Random input for `op`: small integers (sums and products stay exact or wrap the same way
// in the reference), floats of mixed sign, products near 1 so they neither vanish nor blow up.
inline void fill_random(DataType t, ReduceOp op, char* p, size_t n, int size, Random& rng) {
  if (!is_float(t)) {
    int64_t hi = op == ReduceOp::kProduct                          ? 2
                 : (t == DataType::kUInt8 || t == DataType::kInt8) ? 120 / size
                                                                   : 1000;
    int64_t lo = t == DataType::kUInt8 ? 0 : -hi;
    for (size_t i = 0; i < n; ++i) set_int(t, p, i, static_cast<uint64_t>(rng.uniform(lo, hi)));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    double v = op == ReduceOp::kProduct ? rng.real(0.5, 2.0) * (rng.next() & 1 ? 1 : -1)
                                        : rng.real(-1.0, 1.0);
    set_float(t, p, i, v);
  }
}

// Machine epsilon of one rounding in type t (float16/bfloat16 round every step).
inline double unit_roundoff(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return std::ldexp(1.0, -11);
    case DataType::kBFloat16:
      return std::ldexp(1.0, -8);
    case DataType::kFloat32:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// Checks out[i] against the reduction of inputs[r][i] over r, element by element.
inline void expect_reduced(DataType t, ReduceOp op, const std::vector<std::vector<char>>& inputs,
                           const char* out, size_t offset, size_t count) {
  int p = static_cast<int>(inputs.size());
  size_t bad = 0;
  for (size_t i = offset; i < offset + count && bad < 5; ++i) {
    const char* got_p = out;
    size_t gi = i - offset;
    if (!is_float(t)) {
      uint64_t acc = static_cast<uint64_t>(get_int(t, inputs[0].data(), i));
      int64_t mn = get_int(t, inputs[0].data(), i), mx = mn;
      for (int r = 1; r < p; ++r) {
        int64_t v = get_int(t, inputs[r].data(), i);
        acc = op == ReduceOp::kProduct ? acc * static_cast<uint64_t>(v) : acc + v;
        mn = std::min(mn, v);
        mx = std::max(mx, v);
      }
      char tmp[8];
      int64_t want = set_int(t, tmp, 0, acc);
      if (op == ReduceOp::kAverage) want /= p;
      if (op == ReduceOp::kMin) want = mn;
      if (op == ReduceOp::kMax) want = mx;
      int64_t got = get_int(t, got_p, gi);
      if (got != want) ++bad;
      EXPECT_EQ(got, want) << "element " << i;
      continue;
    }
    double acc = get_float(t, inputs[0].data(), i), mag = std::fabs(acc);
    double mn = acc, mx = acc;
    for (int r = 1; r < p; ++r) {
      double v = get_float(t, inputs[r].data(), i);
      acc = op == ReduceOp::kProduct ? acc * v : acc + v;
      mag = op == ReduceOp::kProduct ? std::fabs(acc) : mag + std::fabs(v);
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    double got = get_float(t, got_p, gi);
    double want = acc, tol = 2.0 * p * unit_roundoff(t) * mag;
    if (op == ReduceOp::kAverage) {
      want /= p;
      tol = tol / p + 2 * unit_roundoff(t) * std::fabs(want);
    }
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      want = op == ReduceOp::kMin ? mn : mx;
      tol = 0;
    }
    if (!(std::fabs(got - want) <= tol + 1e-300)) ++bad;
    EXPECT_NEAR(got, want, tol + 1e-300) << "element " << i;
  }
}

// Data types and ops that between them reach every reduction kernel, at one to five MiB
// (bytes, rounded down to whole elements): for the collectives that work in blocks and
// units. 5 MiB spans several 1 MiB units and many blocks.
struct ReduceCase {
  DataType type;
  ReduceOp op;
  size_t bytes;
};
inline std::vector<ReduceCase> mixed_reduce_cases() {
  constexpr size_t kMiB = size_t{1} << 20;
  return {{DataType::kFloat32, ReduceOp::kSum, 5 * kMiB},
          {DataType::kFloat32, ReduceOp::kAverage, kMiB},
          {DataType::kFloat64, ReduceOp::kMax, 3 * kMiB},
          {DataType::kInt32, ReduceOp::kAverage, 2 * kMiB},
          {DataType::kUInt8, ReduceOp::kSum, kMiB},
          {DataType::kFloat16, ReduceOp::kSum, 2 * kMiB},
          {DataType::kBFloat16, ReduceOp::kMin, kMiB},
          {DataType::kInt64, ReduceOp::kProduct, kMiB}};
}

}  // namespace chorus::comm::testing
