// How chorus's own background threads (the engine's) present themselves to the scheduler.
//
// Why SCHED_BATCH: a background thread is woken by the thread that hands it work (an op
// enqueued, a gradient ready). Under the normal policy the woken thread may preempt its
// waker on a core where nothing else is free, as with 2 workers on 2 cores: the op then
// runs to completion before enqueue() returns to the caller, which pays a context switch
// and sees an "async" op that is always done already (Horovod's tests assert the opposite;
// docs/engine.md). A batch thread still runs at once on an idle core, and on a busy one as
// soon as its waker blocks, yields or ends its time slice, with the same share of the CPU.
// So whatever waits for it without blocking must yield (Handle::poll does).
#pragma once

namespace chorus {

// Names the calling thread `name` (up to 15 characters are kept: top -H, perf and gdb
// show it) and makes it SCHED_BATCH. Best effort: a kernel or sandbox that refuses either
// leaves the thread as it was (logged at debug level). Never throws.
void become_background_thread(const char* name) noexcept;

}  // namespace chorus
