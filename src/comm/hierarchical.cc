// The hierarchical allreduce, for ranks on several hosts with the same number on each:
//   1. reduce-scatter among the ranks of each host (their shared-memory links): local rank l
//      ends with slice l of its host's sum;
//   2. allreduce of slice l among local rank l of every host: one stream per local rank
//      crosses the network, each with 1/L of the data, so the hosts' links carry
//      2 (H-1)/H of the buffer instead of the flat ring's 2 (p-1)/p on each of its
//      cross-host hops;
//   3. allgather among the ranks of each host.
// Every rank computes the same groups from the topology (host_of_rank), so the steps match.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "comm/allreduce_plan.h"
#include "comm/ring.h"
#include "util/reduce.h"

namespace chorus::comm {
namespace {

// The ranks of host `host`, ascending; and the rank with local index `local` on each host,
// by host index.
std::vector<int> ranks_of_host(const transport::Topology& t, int host) {
  std::vector<int> ranks;
  for (int r = 0; r < t.size; ++r) {
    if (t.host_of_rank[r] == host) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> local_rank_on_every_host(const transport::Topology& t, int local) {
  std::vector<int> ranks;
  for (int h = 0; h < t.cross_size; ++h) ranks.push_back(ranks_of_host(t, h)[local]);
  return ranks;
}

// The cross-host step, over sockets: the flat plan's algorithm for a slice of this size.
void allreduce_across(Context& ctx, void* slice, size_t count, DataType type, ReduceOp op) {
  switch (plan_by_size(count * dtype_size(type), ctx.size(), /*sockets=*/true).path) {
    case AllreducePath::kRecursiveDoubling:
      return allreduce_recursive_doubling(ctx, slice, slice, count, type, op);
    case AllreducePath::kHalvingDoubling:
      return allreduce_halving_doubling(ctx, slice, slice, count, type, op);
    default:
      return allreduce_ring(ctx, slice, slice, count, type, op);
  }
}

}  // namespace

bool hosts_are_uniform(const transport::Topology& t) {
  if (t.cross_size < 2 || t.local_size < 2) return false;
  std::vector<int> per_host(t.cross_size, 0);
  for (int h : t.host_of_rank) ++per_host[h];
  for (int n : per_host) {
    if (n != t.local_size) return false;
  }
  return true;
}

void allreduce_hierarchical(Context& ctx, const transport::Topology& t, const void* send,
                            void* recv, size_t count, DataType type, ReduceOp op) {
  const std::vector<int> local = ranks_of_host(t, t.cross_rank);
  const std::vector<int> cross = local_rank_on_every_host(t, t.local_rank);
  Context on_host = ctx.among(local, t.local_rank);
  Context across = ctx.among(cross, t.cross_rank);
  // Averages are sums until the slice is final: then divided once, by every rank.
  ReduceOp step_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  std::vector<size_t> offsets;  // the slices (the ring's scratch offsets are its own)
  balanced_offsets(count, local.size(), offsets);
  size_t es = dtype_size(type);
  char* out = static_cast<char*>(recv);
  char* slice = out + offsets[t.local_rank] * es;
  size_t slice_count = offsets[t.local_rank + 1] - offsets[t.local_rank];

  RingSpec scatter;
  scatter.seg_off = offsets.data();
  scatter.type = type;
  scatter.op = step_op;
  scatter.reduce_scatter = true;
  scatter.src = static_cast<const char*>(send);
  scatter.acc = out;
  scatter.own_out = slice;
  ring_run(on_host, scatter);

  if (slice_count > 0) allreduce_across(across, slice, slice_count, type, step_op);
  if (op == ReduceOp::kAverage) divide(type, slice, slice_count, t.size);

  RingSpec gather;
  gather.seg_off = offsets.data();
  gather.type = type;
  gather.allgather = true;
  gather.acc = out;
  ring_run(on_host, gather);
}

}  // namespace chorus::comm
