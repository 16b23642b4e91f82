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

#include "chorus/dtype.h"
#include "comm/context.h"

namespace chorus::comm {

struct RingSpec {
  const size_t* seg_off = nullptr;  // p + 1 element offsets: segment i = [off[i], off[i+1])
  DataType type = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  bool reduce_scatter = false;
  bool allgather = false;
  const char* src = nullptr;  // full layout: this rank's input (reduce-scatter only)
  char* acc = nullptr;        // full layout: partial results and allgather receives
  char* own_out = nullptr;    // where segment rank() ends reduced (acc + its offset, or not)
  int64_t divisor = 1;        // > 1: the own segment is divided as it is finished (average)
};

void ring_run(Context& ctx, const RingSpec& spec);

}  // namespace chorus::comm
