// Element types and reduction operations understood by every collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus {

enum class DataType : uint8_t {
  kUInt8,
  kInt8,
  kInt32,
  kInt64,
  kFloat16,   // IEEE 754 binary16; reduced with float32 arithmetic per addition
  kBFloat16,  // bfloat16; reduced with float32 arithmetic per addition
  kFloat32,
  kFloat64,
  kInt16,  // appended last: values are on the wire
};

inline constexpr int kNumDataTypes = 9;

enum class ReduceOp : uint8_t {
  kSum,
  kAverage,  // sum, then divided by the number of ranks (integers: truncating division)
  kMin,
  kMax,
  kProduct,
  // Horovod's adaptive summation (Adasum): not element-wise. Each tensor is combined over a
  // binary tree of the ranks, (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, so orthogonal
  // tensors add up and parallel ones average. allreduce only; floating-point types; a
  // power-of-two number of ranks (InvalidArgument otherwise). docs/algorithms.md.
  kAdasum,
};

// The element-wise ops, kSum .. kProduct (what reduce_scatter and the reduction kernels
// take); kAdasum comes after them.
inline constexpr int kNumReduceOps = 5;

// Bytes per element.
size_t dtype_size(DataType type);
// float16, bfloat16, float32, float64.
bool is_floating_point(DataType type);
// "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "int16".
const char* dtype_name(DataType type);
// "sum", "average", "min", "max", "product", "adasum".
const char* reduce_op_name(ReduceOp op);
// Inverses of the above; throw InvalidArgument on an unknown name.
DataType parse_dtype(const std::string& name);
ReduceOp parse_reduce_op(const std::string& name);

}  // namespace chorus
