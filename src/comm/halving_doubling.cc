// Recursive doubling and recursive halving-doubling (Rabenseifner) allreduce.
//
// Both run on a power-of-two group p2 <= p. The first 2 * (p - p2) ranks fold in pairs
// before the core: the even rank of each pair hands its whole input to the odd one and sits
// out, and gets the final result back at the end (MPICH's scheme). Ranks are renumbered
// 0..p2-1 for the core.
#include <cstring>

#include "comm/algorithms.h"
#include "comm/recv_reduce.h"
#include "util/reduce.h"

namespace chorus::comm {
namespace {

using transport::Transfer;

constexpr size_t kReduceBlock = size_t{128} << 10;

struct Fold {
  int p2 = 1;         // power of two taking part in the core
  int rem = 0;        // p - p2 pairs fold
  int new_rank = -1;  // rank in the core, -1 when this rank sits out
  int real(int nr) const { return nr < rem ? 2 * nr + 1 : nr + rem; }
};

Fold make_fold(int rank, int p) {
  Fold f;
  while (f.p2 * 2 <= p) f.p2 *= 2;
  f.rem = p - f.p2;
  if (rank < 2 * f.rem) {
    f.new_rank = rank % 2 == 1 ? rank / 2 : -1;
  } else {
    f.new_rank = rank - f.rem;
  }
  return f;
}

// Sends send_bytes to `peer` while receiving recv_bytes from it, and makes
// dest = op(in, received) element by element as data arrives. When the outgoing bytes live
// in dest (recursive doubling sends the very buffer it reduces into), only what has already
// left may be overwritten: `send_guards_dest`.
void exchange_reduce(Context& ctx, int peer, const char* send, size_t send_bytes, char* dest,
                     const char* in, size_t recv_bytes, DataType type, ReduceOp op,
                     bool send_guards_dest) {
  transport::Link& link = ctx.link(peer);
  Transfer t[2] = {Transfer::recv_message(link, ctx.ws.incoming.get(recv_bytes), recv_bytes),
                   Transfer::send_message(link, send, send_bytes)};
  RecvReduce reducer(&t[0], dest, in, type, op);
  while (!reducer.done() || !t[1].complete()) {
    bool moved = ctx.progress.poll(&t[1], 1);
    size_t allowed = send_guards_dest ? t[1].done - reducer.reduced() : recv_bytes;
    if (reducer.pump(ctx.progress, std::min(allowed, kReduceBlock)) > 0) moved = true;
    if (moved) continue;
    // Held back by our own send: waiting for the peer's bytes would return at once.
    bool send_limits = send_guards_dest && t[1].done - reducer.reduced() < dtype_size(type);
    if (send_limits && !t[1].complete()) {
      ctx.progress.idle(&t[1], 1);
    } else {
      ctx.progress.idle(t, 2);
    }
  }
}

// The fold before the core. Returns the buffer holding this rank's input from now on.
const char* fold_in(Context& ctx, const Fold& f, const char* in, char* out, size_t bytes,
                    DataType type, ReduceOp op) {
  int r = ctx.rank();
  if (r >= 2 * f.rem) return in;
  if (f.new_rank < 0) {
    Transfer t = Transfer::send_message(ctx.link(r + 1), in, bytes);
    ctx.progress.finish(&t, 1);
    return in;
  }
  exchange_reduce(ctx, r - 1, nullptr, 0, out, in, bytes, type, op, false);
  return out;
}

// The fold after the core: odd ranks of folded pairs hand the result to their partner.
void fold_out(Context& ctx, const Fold& f, char* out, size_t bytes) {
  int r = ctx.rank();
  if (r >= 2 * f.rem) return;
  Transfer t = f.new_rank < 0 ? Transfer::recv_message(ctx.link(r + 1), out, bytes)
                              : Transfer::send_message(ctx.link(r - 1), out, bytes);
  ctx.progress.finish(&t, 1);
}

void finish_average(Context& ctx, DataType type, ReduceOp op, void* buf, size_t count) {
  if (op == ReduceOp::kAverage) divide(type, buf, count, ctx.size());
}

}  // namespace

void exchange(Context& ctx, int peer, const void* send, size_t send_bytes, void* recv,
              size_t recv_bytes) {
  transport::Link& link = ctx.link(peer);
  Transfer t[2] = {Transfer::recv_message(link, recv, recv_bytes),
                   Transfer::send_message(link, send, send_bytes)};
  ctx.progress.finish(t, 2);
}

void allreduce_recursive_doubling(Context& ctx, const void* send, void* recv, size_t count,
                                  DataType type, ReduceOp op) {
  size_t bytes = count * dtype_size(type);
  char* out = static_cast<char*>(recv);
  Fold f = make_fold(ctx.rank(), ctx.size());
  const char* in = fold_in(ctx, f, static_cast<const char*>(send), out, bytes, type, op);
  if (f.new_rank >= 0) {
    for (int mask = 1; mask < f.p2; mask <<= 1) {
      int peer = f.real(f.new_rank ^ mask);
      exchange_reduce(ctx, peer, in, bytes, out, in, bytes, type, op, in == out);
      in = out;
    }
    if (in != out) std::memcpy(out, in, bytes);  // p2 == 1 cannot happen for p > 1
    finish_average(ctx, type, op, out, count);
  }
  fold_out(ctx, f, out, bytes);
}

void allreduce_halving_doubling(Context& ctx, const void* send, void* recv, size_t count,
                                DataType type, ReduceOp op) {
  size_t es = dtype_size(type);
  char* out = static_cast<char*>(recv);
  Fold f = make_fold(ctx.rank(), ctx.size());
  const char* in = fold_in(ctx, f, static_cast<const char*>(send), out, count * es, type, op);
  if (f.new_rank >= 0) {
    size_t p2 = f.p2, me = f.new_rank;
    auto off = [&](size_t block) { return part_offset(count, p2, block) * es; };
    // Recursive halving: keep the half of the current range that holds block `me`.
    for (size_t mask = p2 / 2; mask >= 1; mask /= 2) {
      size_t lo = me & ~(2 * mask - 1), mid = lo + mask, hi = lo + 2 * mask;
      bool upper = (me & mask) != 0;
      size_t keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
      size_t give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
      int peer = f.real(static_cast<int>(me ^ mask));
      exchange_reduce(ctx, peer, in + off(give_lo), off(give_hi) - off(give_lo), out + off(keep_lo),
                      in + off(keep_lo), off(keep_hi) - off(keep_lo), type, op, false);
      in = out;
    }
    finish_average(ctx, type, op, out + off(me), (off(me + 1) - off(me)) / es);
    // Recursive doubling allgather: ranges double back up.
    for (size_t mask = 1; mask < p2; mask *= 2) {
      size_t my_lo = me & ~(mask - 1), peer_lo = (me ^ mask) & ~(mask - 1);
      int peer = f.real(static_cast<int>(me ^ mask));
      exchange(ctx, peer, out + off(my_lo), off(my_lo + mask) - off(my_lo), out + off(peer_lo),
               off(peer_lo + mask) - off(peer_lo));
    }
  }
  fold_out(ctx, f, out, count * es);
}

}  // namespace chorus::comm
