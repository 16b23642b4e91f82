#include "chorus/dtype.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus {

TEST(DType, SizesAndNamesRoundTrip) {
  const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8, 2};
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto t = static_cast<DataType>(i);
    EXPECT_EQ(dtype_size(t), sizes[i]);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  }
  EXPECT_STREQ(reduce_op_name(ReduceOp::kAdasum), "adasum");
  EXPECT_EQ(parse_reduce_op("adasum"), ReduceOp::kAdasum);
}

TEST(DType, UnknownNamesAreInvalidArguments) {
  EXPECT_THROW(parse_dtype("float128"), InvalidArgument);
  try {
    parse_reduce_op("median");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown reduce op 'median'"), std::string::npos);
  }
}

}  // namespace chorus
