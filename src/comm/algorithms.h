// The collective algorithms on raw buffers. Each is called by every rank of ctx.mesh with
// matching arguments; sizes are in elements, offsets are size_t. Arguments have been
// validated by the Communicator; size() > 1 unless stated. Errors propagate from Progress
// (IoError, TimeoutError) and leave the links in an undefined state (the caller aborts).
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/dtype.h"
#include "comm/context.h"

namespace chorus::comm {

// Allreduce; `send` may equal `recv`. kAverage divides the result by size().
void allreduce_ring(Context& ctx, const void* send, void* recv, size_t count, DataType type,
                    ReduceOp op);
// The single-copy ring over parts, as over their concatenation of `count` elements.
// REQUIRES: ctx.single_copy.
void allreduce_ring_parts(Context& ctx, const std::vector<BufferPart>& parts, size_t count,
                          DataType type, ReduceOp op);
void allreduce_halving_doubling(Context& ctx, const void* send, void* recv, size_t count,
                                DataType type, ReduceOp op);
void allreduce_recursive_doubling(Context& ctx, const void* send, void* recv, size_t count,
                                  DataType type, ReduceOp op);

// kAuto's crossovers (bytes per rank's buffer), measured on loopback TCP: see
// docs/algorithms.md for the numbers and the command.
inline constexpr size_t kRecursiveDoublingMaxBytes = size_t{16} << 10;
inline constexpr size_t kHalvingDoublingMaxBytes = size_t{4} << 20;
// Broadcasts up to this size use the binomial tree, larger ones the pipelined chain.
inline constexpr size_t kBroadcastTreeMaxBytes = size_t{64} << 10;

// Ring calls of at least this many bytes (the whole buffer) read peers' memory directly when
// every rank is on one host and may (CommunicatorOptions::shm_single_copy).
inline constexpr size_t kSingleCopyMinBytes = size_t{1} << 20;

// The algorithm kAuto picks for `bytes` over `size` ranks; a concrete `requested` wins.
AllreduceAlgorithm choose_allreduce(AllreduceAlgorithm requested, size_t bytes, int size);

// Ring allgatherv: recv holds every rank's block at its prefix-sum offset.
void allgatherv_ring(Context& ctx, const void* send, void* recv, const std::vector<size_t>& counts,
                     DataType type);

// Ring reduce-scatter: rank r gets block r of the reduction in recv. When send == recv the
// result is left at the start of the buffer.
void reduce_scatter_ring(Context& ctx, const void* send, void* recv,
                         const std::vector<size_t>& counts, DataType type, ReduceOp op);

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
