// Which instruction set the reduction kernels use. The AVX2+F16C kernels are picked at
// run time when the CPU has them; tests switch them off to check the portable kernels too.
#pragma once

namespace chorus::reduce_detail {

bool avx2_available();
bool avx2_enabled();
// Enables (when available) or disables the AVX2 kernels for the whole process.
void set_avx2_enabled(bool on);

}  // namespace chorus::reduce_detail
