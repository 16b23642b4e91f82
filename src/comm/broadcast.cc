// Broadcast: a binomial tree (lg p rounds: latency-bound messages) or a chain through the
// ranks in root-relative order in which every rank forwards bytes as soon as they arrive
// (bandwidth-bound messages: time ~ n/B + p * per-hop latency).
#include <array>

#include "comm/algorithms.h"

namespace chorus::comm {
namespace {

using transport::Transfer;

int lowest_bit(int v) { return v & -v; }

}  // namespace

void broadcast_tree(Context& ctx, void* buffer, size_t bytes, int root) {
  int p = ctx.size();
  int vr = mod(ctx.rank() - root, p);
  auto real = [&](int v) { return mod(v + root, p); };
  int top = 1;
  while (top < p) top <<= 1;
  int span = vr == 0 ? top : lowest_bit(vr);
  if (vr != 0) {
    Transfer t = Transfer::recv_message(ctx.link(real(vr - span)), buffer, bytes);
    ctx.progress.finish(&t, 1);
  }
  std::array<Transfer, 32> sends;  // one child per bit of the rank
  size_t n = 0;
  for (int mask = span / 2; mask >= 1; mask /= 2) {
    if (vr + mask < p) {
      sends[n++] = Transfer::send_message(ctx.link(real(vr + mask)), buffer, bytes);
    }
  }
  ctx.progress.finish(sends.data(), n);
}

void broadcast_chain(Context& ctx, void* buffer, size_t bytes, int root) {
  int p = ctx.size();
  int vr = mod(ctx.rank() - root, p);
  bool has_prev = vr != 0, has_next = vr + 1 < p;
  Transfer t[2];  // [0] from the previous rank, [1] to the next
  if (has_prev) t[0] = Transfer::recv_message(ctx.link(mod(ctx.rank() - 1, p)), buffer, bytes);
  if (has_next) t[1] = Transfer::send_message(ctx.link(mod(ctx.rank() + 1, p)), buffer, 0, bytes);
  for (;;) {
    // Forward whatever has arrived: the root has it all from the start.
    if (has_next) t[1].size = has_prev ? t[0].done : bytes;
    if (t[0].complete() && t[1].complete() && (!has_next || t[1].size == bytes)) return;
    if (!ctx.progress.poll(t, 2)) ctx.progress.idle(t, 2);
  }
}

void broadcast(Context& ctx, void* buffer, size_t bytes, int root) {
  if (bytes <= kBroadcastTreeMaxBytes || ctx.size() == 2) {
    broadcast_tree(ctx, buffer, bytes, root);
  } else {
    broadcast_chain(ctx, buffer, bytes, root);
  }
}

}  // namespace chorus::comm
