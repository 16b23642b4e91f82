#include "engine/scale.h"

#include <cstdint>
#include <cstring>

#include "util/reduce.h"

namespace chorus::engine {
namespace {

template <typename T, typename F>
void scale_as(void* dst, const void* src, size_t n, F factor) {
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(s[i] * factor);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scale_half(void* dst, const void* src, size_t n, float factor) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* s = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = FromFloat(ToFloat(s[i]) * factor);
}

}  // namespace

void scale_copy(DataType type, void* dst, const void* src, size_t count, double factor) {
  if (factor == 1.0) {
    if (dst != src && count > 0) std::memcpy(dst, src, count * dtype_size(type));
    return;
  }
  switch (type) {
    case DataType::kUInt8:
      return scale_as<uint8_t>(dst, src, count, factor);
    case DataType::kInt8:
      return scale_as<int8_t>(dst, src, count, factor);
    case DataType::kInt32:
      return scale_as<int32_t>(dst, src, count, factor);
    case DataType::kInt64:
      return scale_as<int64_t>(dst, src, count, factor);
    case DataType::kInt16:
      return scale_as<int16_t>(dst, src, count, factor);
    case DataType::kFloat16:
      return scale_half<half_to_float, float_to_half>(dst, src, count, static_cast<float>(factor));
    case DataType::kBFloat16:
      return scale_half<bfloat16_to_float, float_to_bfloat16>(dst, src, count,
                                                              static_cast<float>(factor));
    case DataType::kFloat32:
      return scale_as<float>(dst, src, count, static_cast<float>(factor));
    case DataType::kFloat64:
      return scale_as<double>(dst, src, count, factor);
  }
}

}  // namespace chorus::engine
