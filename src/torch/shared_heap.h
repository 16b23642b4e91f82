// The shared heap: where a job's ranks share a host, chorus::init() hands libtorch's CPU
// allocator a heap in memory that every rank maps (Communicator::alloc_shared, pages on
// first touch), and tensors of kSharedHeapMinBytes or more are born there. A gradient is
// then in shared memory the moment autograd makes it, and its allreduce runs in place in
// shared memory: each rank reduces its share straight from every rank's gradient into every
// rank's (no copy into a bucket, none through a link, none back). docs/torch.md.
//
// Nothing else changes for tensors: they are ordinary CPU tensors, valid for as long as
// anything holds them, also after shutdown() (the heap's memory goes with its last tensor).
// In a forked child the heap is private (copy-on-write) and new tensors come from the
// allocator that was there before.
#pragma once

#include <cstddef>

namespace chorus {
class Communicator;
}

namespace chorus::detail {

// Smaller tensors come from the allocator that was there before.
inline constexpr size_t kSharedHeapMinBytes = size_t{64} << 10;

// Collective over `world` (every rank alike, before its engine starts): reserves a heap as
// large as this host's memory and installs the allocator, when the ranks share memory and
// CHORUS_SHARED_HEAP is not 0 (which must be alike on every rank); otherwise nothing.
void start_shared_heap(Communicator& world);
// After the engine that ran on the heap's communicator stopped: new tensors come from the
// allocator that was there before, and the other ranks' heaps are unmapped.
void retire_shared_heap();
// Whether new tensors of kSharedHeapMinBytes or more are born in shared memory of the
// world's communicator (every rank alike, unless that heap is full).
bool shared_heap_active();
// plan_buckets' in_place_min_bytes for an optimizer that reduces on the world's
// communicator (`on_world`): kInPlaceMinBytes while the heap is active, else 0 (every
// parameter goes to a bucket).
size_t in_place_min_bytes(bool on_world);

}  // namespace chorus::detail
