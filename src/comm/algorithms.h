// The collective algorithms on raw buffers. Each is called by every rank of ctx.mesh with
// matching arguments; sizes are in elements, offsets are size_t. Arguments have been
// validated by the Communicator; size() > 1 unless stated. Errors propagate from Progress
// (IoError, TimeoutError) and leave the links in an undefined state (the caller aborts).
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/dtype.h"
#include "comm/allreduce_plan.h"
#include "comm/context.h"

namespace chorus::comm {

// Allreduce; `send` may equal `recv`. kAverage divides the result by size(). `mode`: how
// the ring moves its data (allreduce_plan.h; kSingleCopy REQUIRES that every rank agreed
// it may read its peers' memory, kStreaming that every link is shared memory).
void allreduce_ring(Context& ctx, const void* send, void* recv, size_t count, DataType type,
                    ReduceOp op, RingMode mode = RingMode::kStream);
// The single-copy ring over parts, as over their concatenation of `count` elements.
// REQUIRES: as kSingleCopy above.
void allreduce_ring_parts(Context& ctx, const std::vector<BufferPart>& parts, size_t count,
                          DataType type, ReduceOp op);
// The direct single-copy allreduce (direct_single_copy.cc) over parts, as over their
// concatenation of `count` elements (a single buffer is one part): rank r reduces part r of
// it from every rank's memory into every rank's. REQUIRES: every rank on this host and
// agreed it may read (so write) its peers' memory (agree_single_copy).
void allreduce_direct(Context& ctx, const std::vector<BufferPart>& parts, size_t count,
                      DataType type, ReduceOp op);
// Collective: whether every rank's `send` is its `recv` (one small allreduce).
bool every_rank_in_place(Context& ctx, const void* send, const void* recv);
void allreduce_halving_doubling(Context& ctx, const void* send, void* recv, size_t count,
                                DataType type, ReduceOp op);
void allreduce_recursive_doubling(Context& ctx, const void* send, void* recv, size_t count,
                                  DataType type, ReduceOp op);

// Adasum (adasum.cc): Horovod's adaptive summation of each part, a tensor of its own, by
// one vector-halving distance-doubling over them all; a part's send may equal its recv.
// float32 and float64 are combined in their own type (coefficients in float64), 16-bit
// floats in float32. REQUIRES: is_floating_point(type), size() a power of two.
void adasum_vhdd(Context& ctx, const std::vector<BufferPart>& parts, DataType type);
// The same from every rank's tensor, gathered in rank order (`ranks` * count elements),
// combined here in the same working types (the MPI path gathers through MPI). `scratch`:
// working memory.
void adasum_gathered(const void* gathered, void* recv, size_t count, int ranks, DataType type,
                     Scratch& scratch);

// Sends send_bytes to `peer` while receiving recv_bytes from it (either may be 0).
void exchange(Context& ctx, int peer, const void* send, size_t send_bytes, void* recv,
              size_t recv_bytes);

// Whether there are several hosts with the same number (> 1) of ranks each: where the
// hierarchical allreduce applies.
bool hosts_are_uniform(const transport::Topology& t);
// Reduce-scatter within each host, allreduce of each local rank's slice across hosts,
// allgather within each host (hierarchical.cc). `t` is ctx.mesh's topology. REQUIRES:
// hosts_are_uniform(t), ctx not narrowed.
void allreduce_hierarchical(Context& ctx, const transport::Topology& t, const void* send,
                            void* recv, size_t count, DataType type, ReduceOp op);

// Broadcasts up to this size use the binomial tree, larger ones the pipelined chain.
inline constexpr size_t kBroadcastTreeMaxBytes = size_t{64} << 10;

// Ring allgatherv: recv holds every rank's block at its prefix-sum offset.
void allgatherv_ring(Context& ctx, const void* send, void* recv, const std::vector<size_t>& counts,
                     DataType type, RingMode mode = RingMode::kStream);

// Ring reduce-scatter: rank r gets block r of the reduction in recv. When send == recv the
// result is left at the start of the buffer.
void reduce_scatter_ring(Context& ctx, const void* send, void* recv,
                         const std::vector<size_t>& counts, DataType type, ReduceOp op,
                         RingMode mode = RingMode::kStream);

// Broadcast from root: pipelined chain for large buffers, binomial tree for small ones.
void broadcast(Context& ctx, void* buffer, size_t bytes, int root);
void broadcast_chain(Context& ctx, void* buffer, size_t bytes, int root);
void broadcast_tree(Context& ctx, void* buffer, size_t bytes, int root);

// Pairwise exchange: step k sends to r + k and receives from r - k.
void alltoallv_pairwise(Context& ctx, const void* send, const std::vector<size_t>& send_counts,
                        void* recv, const std::vector<size_t>& recv_counts, DataType type);

// Dissemination barrier: ceil(lg p) rounds of one byte.
void barrier_dissemination(Context& ctx);

}  // namespace chorus::comm
