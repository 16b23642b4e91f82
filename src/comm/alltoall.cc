// alltoallv by pairwise exchange and the dissemination barrier.
#include <cstring>

#include <cstdint>

#include "comm/algorithms.h"

namespace chorus::comm {
namespace {

using transport::Transfer;

bool overlaps(const char* a, size_t a_bytes, const char* b, size_t b_bytes) {
  return a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
}

}  // namespace

void alltoallv_pairwise(Context& ctx, const void* send, const std::vector<size_t>& send_counts,
                        void* recv, const std::vector<size_t>& recv_counts, DataType type) {
  int p = ctx.size(), r = ctx.rank();
  size_t es = dtype_size(type);
  std::vector<size_t>& soff = ctx.ws.offsets;
  std::vector<size_t>& roff = ctx.ws.offsets_peer;
  prefix_offsets(send_counts, soff);
  prefix_offsets(recv_counts, roff);
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  // In place (or overlapping): blocks not yet sent would be overwritten by receives.
  if (overlaps(src, soff[p] * es, dst, roff[p] * es)) {
    char* copy = ctx.ws.accumulator.get(soff[p] * es);
    std::memcpy(copy, src, soff[p] * es);
    src = copy;
  }
  if (recv_counts[r] > 0) std::memmove(dst + roff[r] * es, src + soff[r] * es, recv_counts[r] * es);
  for (int k = 1; k < p; ++k) {
    int to = mod(r + k, p), from = mod(r - k, p);
    Transfer t[2] = {
        Transfer::recv_message(ctx.link(from), dst + roff[from] * es, recv_counts[from] * es),
        Transfer::send_message(ctx.link(to), src + soff[to] * es, send_counts[to] * es)};
    ctx.progress.finish(t, 2);
  }
}

void barrier_dissemination(Context& ctx) {
  int p = ctx.size(), r = ctx.rank();
  for (int k = 1; k < p; k <<= 1) {
    // 8-byte tokens keep every link's byte stream 8-aligned, so the shared-memory rings
    // stay aligned for reducing in place (comm/recv_reduce.h) after a barrier.
    uint64_t out = 1, in = 0;
    Transfer t[2] = {Transfer::recv(ctx.link(mod(r - k, p)), &in, sizeof(in)),
                     Transfer::send(ctx.link(mod(r + k, p)), &out, sizeof(out))};
    ctx.progress.finish(t, 2);
  }
}

}  // namespace chorus::comm
