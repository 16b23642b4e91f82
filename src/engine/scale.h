// Element-wise copies with a scale factor, for prescale/postscale and averaging.
#pragma once

#include <cstddef>

#include "chorus/dtype.h"

namespace chorus::engine {

// dst[i] = src[i] * factor (integers: truncated toward zero; float16/bfloat16 through
// float32). factor == 1 is a plain copy. dst may equal src.
void scale_copy(DataType type, void* dst, const void* src, size_t count, double factor);

}  // namespace chorus::engine
