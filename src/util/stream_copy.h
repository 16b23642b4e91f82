// Copies whose destination bypasses the cache (non-temporal stores). For large results that
// nobody reads again soon: writing them through the cache would first read every
// destination line from memory and then evict data that is about to be used (the inputs
// of the same call), which is what makes an allreduce just larger than the cache slow.
#pragma once

#include <cstddef>

namespace chorus {

// memcpy(dst, src, n) with streaming stores where the CPU has them (x86-64: SSE2), then a
// store fence, so the bytes are visible to other threads like ordinary stores once it
// returns. Small copies and other CPUs use memcpy. REQUIRES: the ranges do not overlap.
void copy_streaming(void* dst, const void* src, size_t n);

}  // namespace chorus
