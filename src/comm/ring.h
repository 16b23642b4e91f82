// The ring: reduce-scatter and/or allgather as one continuous, pipelined byte stream to the
// right neighbour and one from the left.
//
// The buffer is cut into p segments (rank r ends the reduce-scatter owning segment r) and
// each segment into k chunks, the unit of scratch memory. The units are numbered in stream
// order; outgoing unit u (u >= k) carries exactly the bytes of incoming unit u - k after
// they were reduced (or, in the allgather, received). Instead of waiting for whole units, the
// outgoing transfer grows as the incoming one is reduced, element block by element block,
// so receiving, reducing and sending overlap at every scale; sends are polled between
// reduction blocks so the right neighbour never starves while we compute.
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/dtype.h"
#include "comm/allreduce_plan.h"
#include "comm/context.h"

namespace chorus::comm {

struct RingSpec {
  RingMode mode = RingMode::kStream;  // how units move (allreduce_plan.h)
  const size_t* seg_off = nullptr;    // p + 1 element offsets: segment i = [off[i], off[i+1])
  DataType type = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  bool reduce_scatter = false;
  bool allgather = false;
  const char* src = nullptr;  // full layout: this rank's input (reduce-scatter only)
  char* acc = nullptr;        // full layout: partial results and allgather receives
  char* own_out = nullptr;    // where segment rank() ends reduced (acc + its offset, or not)
  int64_t divisor = 1;        // > 1: the own segment is divided as it is finished (average)
  // Single-copy ring only: the full layout is these buffers, concatenated (src and acc are
  // then unused; own_out is acc's). Parts with no elements are allowed.
  const std::vector<BufferPart>* parts = nullptr;
};

// Runs the ring as spec.mode says: the single-copy pull ring, or the byte stream
// (chunk-major with streaming stores for kStreaming and kStreamingFar).
void ring_run(Context& ctx, const RingSpec& spec);

// Where the ring's units lie, for both ways of running it. Units are numbered in stream
// order. Step-major (the default): unit u is chunk u % k of the segment sent (and
// received) at step u / k, where steps 0 .. rs_steps-1 reduce-scatter and the rest
// allgather. Chunk-major: unit u is step u % steps of chunk u / steps, so each chunk
// goes through every step before the next starts and a result leaves again right after it
// was made (the streaming ring below). Either way an outgoing unit of a step > 0 carries the
// bytes of one incoming unit, source_of(u), once they were reduced or received.
struct RingLayout {
  RingLayout(const RingSpec& spec, int rank, int size, size_t chunk_bytes,
             bool chunk_major = false);
  int send_segment(size_t step) const;
  int recv_segment(size_t step) const;
  // Element offset (full layout) and count of chunk j of segment seg.
  void chunk(int seg, size_t j, size_t* off, size_t* cnt) const;
  size_t step_of(size_t u) const { return chunk_major ? u % steps : u / k; }
  size_t chunk_of(size_t u) const { return chunk_major ? u / steps : u % k; }
  // REQUIRES: step_of(u) > 0.
  size_t source_of(size_t u) const { return chunk_major ? u - 1 : u - k; }

  const RingSpec& s;
  int p, r;
  size_t es;
  bool chunk_major;
  size_t k = 1;         // chunks per segment
  size_t rs_steps = 0;  // p - 1 with a reduce-scatter, else 0
  size_t steps = 0;     // rs_steps plus p - 1 with an allgather
  size_t units = 0;
  size_t max_chunk = 0;  // elements in the largest chunk
};

// The ring for ranks that can read each other's memory (PeerMemory::read): instead
// of streaming the data, each rank tells its right neighbour which units are ready (an
// 8-byte token each) and the neighbour copies them straight out of this rank's buffers —
// one copy instead of two, reduced from cache-sized blocks. See docs/algorithms.md.
void ring_run_single_copy(Context& ctx, const RingSpec& spec);

// The collective agreement behind RingMode::kSingleCopy: true when every rank can read the
// memory of every peer. A barrier first, so that every peer's link end exists.
bool agree_single_copy(Context& ctx);

}  // namespace chorus::comm
