// glibc's malloc, set up for training loops (chorus::init calls this).
//
// Why: a training step allocates and frees the same large tensors every step. With glibc's
// defaults, blocks over a dynamic threshold are mmap()ed and given back on free(), and the
// heap is trimmed as soon as 128 KiB sit free at its top, so each step faults the same
// memory in again page by page (the kernel zeroing every page). Measured on a 2-core EPYC
// VM with examples/fashion_mnist, one worker: 27.1 ms mean step time, 6.2 ms standard
// deviation; with the tuning 20.3 ms and 1.2 ms (docs/torch.md). The spread matters twice
// for synchronous training: every step waits for the slowest rank.
//
// What: blocks up to 32 MiB (glibc's largest mmap threshold) come from the heap, and the
// heap keeps up to 256 MiB free at its top instead of returning it. The process keeps the
// memory of its largest step, as a caching allocator would.
#pragma once

#include <string>

namespace chorus {

struct MallocTuning {
  bool applied = false;
  std::string why;  // one line: what was set, or why nothing was
};

// Applies the tuning once per process, unless CHORUS_MALLOC_TUNING=0, the user tuned glibc's
// malloc already (GLIBC_TUNABLES naming glibc.malloc, or a MALLOC_*_ variable), or another
// allocator is preloaded (LD_PRELOAD). Later calls return the first call's result.
MallocTuning tune_malloc_for_training();

}  // namespace chorus
