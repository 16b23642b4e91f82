#include "chorus/dtype.h"

#include "chorus/error.h"

namespace chorus {
namespace {
constexpr const char* kTypeNames[kNumDataTypes] = {
    "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "int16"};
constexpr size_t kTypeSizes[kNumDataTypes] = {1, 1, 4, 8, 2, 2, 4, 8, 2};
constexpr const char* kOpNames[kNumReduceOps + 1] = {"sum", "average", "min",
                                                     "max", "product", "adasum"};
}  // namespace

size_t dtype_size(DataType type) {
  auto i = static_cast<size_t>(type);
  CHORUS_CHECK_ARG(i < kNumDataTypes, "unknown dtype ", i);
  return kTypeSizes[i];
}

bool is_floating_point(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBFloat16 || type == DataType::kFloat32 ||
         type == DataType::kFloat64;
}

const char* dtype_name(DataType type) {
  auto i = static_cast<size_t>(type);
  return i < kNumDataTypes ? kTypeNames[i] : "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  auto i = static_cast<size_t>(op);
  return i <= kNumReduceOps ? kOpNames[i] : "unknown";
}

DataType parse_dtype(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (name == kTypeNames[i]) return static_cast<DataType>(i);
  }
  CHORUS_THROW(InvalidArgument, "unknown dtype '", name, "'");
}

ReduceOp parse_reduce_op(const std::string& name) {
  for (int i = 0; i <= kNumReduceOps; ++i) {
    if (name == kOpNames[i]) return static_cast<ReduceOp>(i);
  }
  CHORUS_THROW(InvalidArgument, "unknown reduce op '", name, "'");
}

}  // namespace chorus
