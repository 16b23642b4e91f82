// The reduction loops, as templates instantiated twice by reduce.cc: once for the baseline
// ISA and once inside functions compiled for AVX2+F16C (chosen at run time). The loops are
// plain contiguous `restrict` loops so that the compiler vectorises them; float16/bfloat16
// are processed in small blocks widened to float32 on the stack.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "util/reduce_half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define CHORUS_ALWAYS_INLINE inline __attribute__((always_inline))

namespace chorus::reduce_detail {

struct Half {};      // tag: IEEE binary16 stored as uint16_t
struct BFloat16 {};  // tag: bfloat16 stored as uint16_t

// Integer arithmetic wraps (two's complement) instead of overflowing: computed unsigned.
template <typename T>
using Wide = std::make_unsigned_t<std::conditional_t<(sizeof(T) < sizeof(int)), int, T>>;

struct SumOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct ProductOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    } else {
      return a * b;
    }
  }
};
struct MinOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <typename T, typename Op>
CHORUS_ALWAYS_INLINE void into_loop(T* __restrict acc, const T* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], in[i]);
}

template <typename T, typename Op>
CHORUS_ALWAYS_INLINE void pair_loop(T* __restrict out, const T* __restrict a, const T* __restrict b,
                                    size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

// Software conversions (any x86-64 / other CPU).
struct SoftHalf {
  static CHORUS_ALWAYS_INLINE void widen(const uint16_t* __restrict in, float* __restrict out,
                                         size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = half_detail::half_to_float(in[i]);
  }
  static CHORUS_ALWAYS_INLINE void narrow(const float* __restrict in, uint16_t* __restrict out,
                                          size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = half_detail::float_to_half(in[i]);
  }
};

struct SoftBFloat16 {
  static CHORUS_ALWAYS_INLINE void widen(const uint16_t* __restrict in, float* __restrict out,
                                         size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = half_detail::bfloat16_to_float(in[i]);
  }
  static CHORUS_ALWAYS_INLINE void narrow(const float* __restrict in, uint16_t* __restrict out,
                                          size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = half_detail::float_to_bfloat16(in[i]);
  }
};

#if defined(__x86_64__)
// Hardware conversions (F16C): 8 lanes per instruction, exact IEEE semantics incl. NaN,
// Inf and subnormals; the tail goes through the software path. Not always_inline: GCC
// refuses to inline target("f16c") code into a template without that target, and one call
// per block of kHalfBlock elements costs nothing.
struct F16cHalf {
  __attribute__((target("avx2,f16c"))) static void widen(const uint16_t* __restrict in,
                                                         float* __restrict out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    SoftHalf::widen(in + i, out + i, n - i);
  }
  __attribute__((target("avx2,f16c"))) static void narrow(const float* __restrict in,
                                                          uint16_t* __restrict out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    SoftHalf::narrow(in + i, out + i, n - i);
  }
};
#endif

// Elements per stack block for the 16-bit float types: small enough to stay in L1.
inline constexpr size_t kHalfBlock = 512;

// out = op(a, b) through float32; out may equal a or b (both are widened before writing).
template <typename Conv, typename Op>
CHORUS_ALWAYS_INLINE void half_pair(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  alignas(64) float fa[kHalfBlock];
  alignas(64) float fb[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    size_t m = std::min(kHalfBlock, n - i);
    Conv::widen(a + i, fa, m);
    Conv::widen(b + i, fb, m);
    into_loop<float, Op>(fa, fb, m);
    Conv::narrow(fa, out + i, m);
  }
}

// The kernels for one element type; Conv picks the 16-bit float conversion.
template <typename T, typename Op, typename HalfConv>
struct Kernel {
  static CHORUS_ALWAYS_INLINE void into(void* acc, const void* in, size_t n) {
    if constexpr (std::is_same_v<T, Half>) {
      half_pair<HalfConv, Op>(static_cast<uint16_t*>(acc), static_cast<uint16_t*>(acc),
                              static_cast<const uint16_t*>(in), n);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      half_pair<SoftBFloat16, Op>(static_cast<uint16_t*>(acc), static_cast<uint16_t*>(acc),
                                  static_cast<const uint16_t*>(in), n);
    } else {
      into_loop<T, Op>(static_cast<T*>(acc), static_cast<const T*>(in), n);
    }
  }
  static CHORUS_ALWAYS_INLINE void pair(void* out, const void* a, const void* b, size_t n) {
    if constexpr (std::is_same_v<T, Half>) {
      half_pair<HalfConv, Op>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                              static_cast<const uint16_t*>(b), n);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      half_pair<SoftBFloat16, Op>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                                  static_cast<const uint16_t*>(b), n);
    } else if (out == a) {
      into_loop<T, Op>(static_cast<T*>(out), static_cast<const T*>(b), n);
    } else if (out == b) {  // every op is commutative
      into_loop<T, Op>(static_cast<T*>(out), static_cast<const T*>(a), n);
    } else {
      pair_loop<T, Op>(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
    }
  }
};

}  // namespace chorus::reduce_detail
