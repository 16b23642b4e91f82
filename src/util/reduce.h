// Element-wise reduction kernels for every DataType x ReduceOp, written so the compiler
// vectorises them (contiguous loops, no aliasing). float16/bfloat16 are widened to float32
// for each operation and rounded back (round-to-nearest-even).
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/dtype.h"

namespace chorus {

// acc[i] = op(acc[i], in[i]) for i < count. kAverage accumulates like kSum (see divide()).
// REQUIRES: acc and in do not overlap unless equal.
void reduce_into(DataType type, ReduceOp op, void* acc, const void* in, size_t count);

// out[i] = op(a[i], b[i]). out may equal a or b.
void reduce_pair(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count);

// buf[i] /= divisor (integers: truncating division). Finishes kAverage.
void divide(DataType type, void* buf, size_t count, int64_t divisor);

// reduce_pair() then divide(), bit for bit, in one pass (out may equal a or b): fused for
// float32/float64 sums, otherwise chunk by chunk so that the division finds the sums still
// in cache.
void reduce_pair_divided(DataType type, ReduceOp op, void* out, const void* a, const void* b,
                         size_t count, int64_t divisor);

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace chorus
