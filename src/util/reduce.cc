#include "util/reduce.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "chorus/error.h"
#include "util/reduce_isa.h"
#include "util/reduce_kernels.h"

namespace chorus {
namespace reduce_detail {
namespace {

using IntoFn = void (*)(void*, const void*, size_t);
using PairFn = void (*)(void*, const void*, const void*, size_t);

template <typename T, typename Op>
void into_generic(void* acc, const void* in, size_t n) {
  Kernel<T, Op, SoftHalf>::into(acc, in, n);
}
template <typename T, typename Op>
void pair_generic(void* out, const void* a, const void* b, size_t n) {
  Kernel<T, Op, SoftHalf>::pair(out, a, b, n);
}

#if defined(__x86_64__)
// The same loops compiled for AVX2 (twice the vector width of the x86-64 baseline, and
// 64-bit integer compares for min/max) with hardware half conversion.
template <typename T, typename Op>
__attribute__((target("avx2,f16c"))) void into_avx2(void* acc, const void* in, size_t n) {
  Kernel<T, Op, F16cHalf>::into(acc, in, n);
}
template <typename T, typename Op>
__attribute__((target("avx2,f16c"))) void pair_avx2(void* out, const void* a, const void* b,
                                                    size_t n) {
  Kernel<T, Op, F16cHalf>::pair(out, a, b, n);
}
#endif

// Rows follow DataType, columns ReduceOp (kAverage accumulates as kSum).
#define CHORUS_ROW(F, T) \
  { F<T, SumOp>, F<T, SumOp>, F<T, MinOp>, F<T, MaxOp>, F<T, ProductOp> }
#define CHORUS_TABLE(F)                                                                            \
  {                                                                                                \
    CHORUS_ROW(F, uint8_t), CHORUS_ROW(F, int8_t), CHORUS_ROW(F, int32_t), CHORUS_ROW(F, int64_t), \
        CHORUS_ROW(F, Half), CHORUS_ROW(F, BFloat16), CHORUS_ROW(F, float), CHORUS_ROW(F, double), \
        CHORUS_ROW(F, int16_t)                                                                     \
  }

const IntoFn kIntoGeneric[kNumDataTypes][kNumReduceOps] = CHORUS_TABLE(into_generic);
const PairFn kPairGeneric[kNumDataTypes][kNumReduceOps] = CHORUS_TABLE(pair_generic);
#if defined(__x86_64__)
const IntoFn kIntoAvx2[kNumDataTypes][kNumReduceOps] = CHORUS_TABLE(into_avx2);
const PairFn kPairAvx2[kNumDataTypes][kNumReduceOps] = CHORUS_TABLE(pair_avx2);
#endif
#undef CHORUS_TABLE
#undef CHORUS_ROW

bool detect_avx2() {
#if defined(__x86_64__)
  // F16C through cpuid: clang (14) does not know "f16c" as a __builtin_cpu_supports name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

std::atomic<bool> g_use_avx2{detect_avx2()};

void check(DataType type, ReduceOp op) {
  CHORUS_CHECK_ARG(static_cast<size_t>(type) < kNumDataTypes, "unknown dtype ",
                   static_cast<int>(type));
  CHORUS_CHECK_ARG(static_cast<size_t>(op) < kNumReduceOps, "unknown reduce op ",
                   static_cast<int>(op));
}

template <typename T>
void divide_integers(void* buf, size_t n, int64_t divisor) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / divisor);
}

// Whether x * (1 / divisor) has the same bits as x / divisor: for a power of two both are
// exact scalings, and the multiplication costs a fraction of a division.
template <typename T>
bool reciprocal_is_exact(T divisor) {
  int exponent;
  return std::frexp(divisor, &exponent) == T(0.5);
}

template <typename T>
void divide_floats(void* buf, size_t n, T divisor) {
  T* __restrict p = static_cast<T*>(buf);
  if (reciprocal_is_exact(divisor)) {
    T reciprocal = T(1) / divisor;
    for (size_t i = 0; i < n; ++i) p[i] = p[i] * reciprocal;
    return;
  }
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / divisor;
}

#if defined(__x86_64__)
// The same loop with AVX2's twice wider vectors; it runs on data the reduction has just
// written, which is still in cache, so the vector width is what bounds it.
template <typename T>
__attribute__((target("avx2"))) void divide_floats_avx2(void* buf, size_t n, T divisor) {
  divide_floats<T>(buf, n, divisor);
}
#endif

template <typename T>
void divide_floats_best(void* buf, size_t n, T divisor) {
#if defined(__x86_64__)
  if (avx2_enabled()) return divide_floats_avx2<T>(buf, n, divisor);
#endif
  divide_floats<T>(buf, n, divisor);
}

// out = (a + b) / divisor in one pass, rounding as a sum then a division do.
template <typename T>
CHORUS_ALWAYS_INLINE void average_pair_loop(T* __restrict out, const T* __restrict a,
                                            const T* __restrict b, size_t n, T divisor) {
  if (reciprocal_is_exact(divisor)) {
    T reciprocal = T(1) / divisor;
    for (size_t i = 0; i < n; ++i) out[i] = (a[i] + b[i]) * reciprocal;
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = (a[i] + b[i]) / divisor;
}

template <typename T>
void average_pair(void* out, const void* a, const void* b, size_t n, T divisor) {
  average_pair_loop(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n,
                    divisor);
}

#if defined(__x86_64__)
template <typename T>
__attribute__((target("avx2"))) void average_pair_avx2(void* out, const void* a, const void* b,
                                                       size_t n, T divisor) {
  average_pair_loop(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n,
                    divisor);
}
#endif

template <typename T>
void average_pair_best(void* out, const void* a, const void* b, size_t n, T divisor) {
#if defined(__x86_64__)
  if (avx2_enabled()) return average_pair_avx2<T>(out, a, b, n, divisor);
#endif
  average_pair<T>(out, a, b, n, divisor);
}

template <typename Conv>
void divide_halves(void* buf, size_t n, float divisor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  alignas(64) float f[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    size_t m = std::min(kHalfBlock, n - i);
    Conv::widen(p + i, f, m);
    divide_floats<float>(f, m, divisor);
    Conv::narrow(f, p + i, m);
  }
}

}  // namespace

bool avx2_available() { return detect_avx2(); }
bool avx2_enabled() { return g_use_avx2.load(std::memory_order_relaxed); }
void set_avx2_enabled(bool on) { g_use_avx2.store(on && detect_avx2()); }

}  // namespace reduce_detail

using namespace reduce_detail;

void reduce_into(DataType type, ReduceOp op, void* acc, const void* in, size_t count) {
  check(type, op);
  if (count == 0 || (acc == in && (op == ReduceOp::kMin || op == ReduceOp::kMax))) return;
  auto t = static_cast<size_t>(type), o = static_cast<size_t>(op);
#if defined(__x86_64__)
  if (avx2_enabled()) return kIntoAvx2[t][o](acc, in, count);
#endif
  kIntoGeneric[t][o](acc, in, count);
}

void reduce_pair(DataType type, ReduceOp op, void* out, const void* a, const void* b,
                 size_t count) {
  check(type, op);
  if (count == 0) return;
  auto t = static_cast<size_t>(type), o = static_cast<size_t>(op);
#if defined(__x86_64__)
  if (avx2_enabled()) return kPairAvx2[t][o](out, a, b, count);
#endif
  kPairGeneric[t][o](out, a, b, count);
}

void divide(DataType type, void* buf, size_t count, int64_t divisor) {
  CHORUS_CHECK_ARG(divisor > 0, "divide by ", divisor);
  if (divisor == 1 || count == 0) return;
  switch (type) {
    case DataType::kUInt8:
      return divide_integers<uint8_t>(buf, count, divisor);
    case DataType::kInt8:
      return divide_integers<int8_t>(buf, count, divisor);
    case DataType::kInt32:
      return divide_integers<int32_t>(buf, count, divisor);
    case DataType::kInt64:
      return divide_integers<int64_t>(buf, count, divisor);
    case DataType::kInt16:
      return divide_integers<int16_t>(buf, count, divisor);
    case DataType::kFloat16:
#if defined(__x86_64__)
      if (avx2_enabled()) return divide_halves<F16cHalf>(buf, count, divisor);
#endif
      return divide_halves<SoftHalf>(buf, count, static_cast<float>(divisor));
    case DataType::kBFloat16:
      return divide_halves<SoftBFloat16>(buf, count, static_cast<float>(divisor));
    case DataType::kFloat32:
      return divide_floats_best<float>(buf, count, static_cast<float>(divisor));
    case DataType::kFloat64:
      return divide_floats_best<double>(buf, count, static_cast<double>(divisor));
  }
  CHORUS_THROW(InvalidArgument, "unknown dtype ", static_cast<int>(type));
}

void reduce_pair_divided(DataType type, ReduceOp op, void* out, const void* a, const void* b,
                         size_t count, int64_t divisor) {
  CHORUS_CHECK_ARG(divisor > 0, "divide by ", divisor);
  bool sum = op == ReduceOp::kSum || op == ReduceOp::kAverage;
  if (sum && type == DataType::kFloat32) {
    return average_pair_best<float>(out, a, b, count, static_cast<float>(divisor));
  }
  if (sum && type == DataType::kFloat64) {
    return average_pair_best<double>(out, a, b, count, static_cast<double>(divisor));
  }
  // Other types round between the two steps: chunks small enough that divide() finds what
  // reduce_pair() wrote still in L1.
  constexpr size_t kChunkBytes = 16 << 10;
  const size_t es = dtype_size(type), step = kChunkBytes / es;
  auto* o = static_cast<char*>(out);
  auto* x = static_cast<const char*>(a);
  auto* y = static_cast<const char*>(b);
  for (size_t i = 0; i < count; i += step) {
    size_t n = std::min(step, count - i);
    reduce_pair(type, op, o + i * es, x + i * es, y + i * es, n);
    divide(type, o + i * es, n, divisor);
  }
}

float half_to_float(uint16_t h) { return half_detail::half_to_float(h); }
uint16_t float_to_half(float f) { return half_detail::float_to_half(f); }
float bfloat16_to_float(uint16_t b) { return half_detail::bfloat16_to_float(b); }
uint16_t float_to_bfloat16(float f) { return half_detail::float_to_bfloat16(f); }

}  // namespace chorus
