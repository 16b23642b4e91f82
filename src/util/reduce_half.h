// Branch-free float16/bfloat16 <-> float32 conversions, written with selects instead of
// branches so that loops over arrays of them vectorise. Private to the reduction kernels;
// the public entry points are half_to_float() etc. in reduce.h.
#pragma once

#include <cstdint>
#include <cstring>

namespace chorus::half_detail {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// After F. Giesen's half_to_float: shift exponent+mantissa into place, rebias, then fix up
// Inf/NaN (exponent all ones) and zero/subnormals (renormalised by one float subtraction).
inline float half_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  uint32_t exp = o & shifted_exp;
  o += (127u - 15u) << 23;
  uint32_t inf_nan = o + ((128u - 16u) << 23);
  uint32_t sub = bits_of(float_of(o + (1u << 23)) - float_of(113u << 23));
  uint32_t r = exp == shifted_exp ? inf_nan : (exp == 0 ? sub : o);
  return float_of(r | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

// After F. Giesen's float_to_half_fast3_rtne: round-to-nearest-even; overflow to Inf; any
// NaN becomes the quiet NaN 0x7e00 (with the sign kept); subnormal results are rounded by
// one float addition (exact under the default rounding mode).
inline uint16_t float_to_half(float f) {
  const uint32_t f32_infty = 255u << 23;
  const uint32_t f16_max = (127u + 16u) << 23;
  const uint32_t denorm_magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = bits_of(f);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t big = u > f32_infty ? 0x7e00u : 0x7c00u;
  uint32_t denorm = bits_of(float_of(u) + float_of(denorm_magic_bits)) - denorm_magic_bits;
  uint32_t mant_odd = (u >> 13) & 1u;
  uint32_t normal = (u + ((15u - 127u) << 23) + 0xfffu + mant_odd) >> 13;
  uint32_t o = u >= f16_max ? big : (u < (113u << 23) ? denorm : normal);
  return static_cast<uint16_t>(o | (sign >> 16));
}

inline float bfloat16_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

// Round-to-nearest-even on the upper 16 bits; NaNs stay NaN (quiet bit set) rather than
// rounding into Inf.
inline uint16_t float_to_bfloat16(float f) {
  uint32_t u = bits_of(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace chorus::half_detail
