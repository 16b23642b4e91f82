// The single-copy ring (ring.h): the same units in the same order as the byte stream, but a
// unit moves by the receiver copying it out of the sender's buffers (process_vm_readv)
// once the sender says it is ready. On each link, per call:
//   sender -> receiver: its three buffer addresses (24 bytes), then one 8-byte token per
//                       unit (its number) as the unit becomes ready;
//   receiver -> sender: 8 bytes once it has read everything, so that the sender's buffers
//                       stay untouched until nobody reads them.
// Every message is a multiple of 8 bytes, keeping the links' streams aligned for the next
// call. Reductions read the peer's data from a cache-sized block of scratch, so each
// element crosses memory once on its way in instead of twice (ring write, ring read).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "chorus/error.h"
#include "comm/algorithms.h"
#include "comm/ring.h"
#include "util/reduce.h"

namespace chorus::comm {
namespace {

using transport::Transfer;

// A unit is announced when it is whole, so units bound how early the right neighbour can
// start on data this rank has just produced: 1 MiB keeps both ranks busy from the first
// microseconds of a 16 MiB call.
constexpr size_t kUnitBytes = size_t{1} << 20;
// Peer data to be reduced is read in blocks that stay in the L2 cache for the reduction.
constexpr size_t kBlockBytes = size_t{256} << 10;

struct Buffers {
  uint64_t src, acc, own_out;
};

class PullRing {
 public:
  PullRing(Context& ctx, const RingSpec& spec)
      : ctx_(ctx),
        s_(spec),
        lay_(spec, ctx.rank(), ctx.size(), kUnitBytes),
        left_rank_(mod(ctx.rank() - 1, ctx.size())),
        left_(ctx.link(left_rank_)),
        right_(ctx.link(mod(ctx.rank() + 1, ctx.size()))) {}

  void run();

 private:
  void exchange_buffers();
  void pull(size_t u);
  uintptr_t remote_address(size_t step, size_t off) const;

  Context& ctx_;
  const RingSpec& s_;
  RingLayout lay_;
  int left_rank_;
  transport::Link& left_;
  transport::Link& right_;
  Buffers left_bufs_{};
};

void PullRing::exchange_buffers() {
  Buffers mine{reinterpret_cast<uintptr_t>(s_.src), reinterpret_cast<uintptr_t>(s_.acc),
               reinterpret_cast<uintptr_t>(s_.own_out)};
  Transfer t[2] = {Transfer::send(right_, &mine, sizeof mine),
                   Transfer::recv(left_, &left_bufs_, sizeof left_bufs_)};
  ctx_.progress.finish(t, 2);
}

// Where the left neighbour keeps the data of the unit it sends at `step`, starting at
// element `off` (full layout); mirrors RingStream::start_send.
uintptr_t PullRing::remote_address(size_t step, size_t off) const {
  size_t es = lay_.es;
  if (lay_.rs_steps > 0 && step == 0) return left_bufs_.src + off * es;
  if (lay_.rs_steps > 0 && step == lay_.rs_steps) {
    return left_bufs_.own_out + (off - s_.seg_off[left_rank_]) * es;
  }
  return left_bufs_.acc + off * es;
}

void PullRing::pull(size_t u) {
  size_t step = u / lay_.k, off, cnt;
  lay_.chunk(lay_.recv_segment(step), u % lay_.k, &off, &cnt);
  size_t es = lay_.es, bytes = cnt * es;
  uintptr_t remote = remote_address(step, off);
  if (step >= lay_.rs_steps) {
    left_.read_peer_memory(s_.acc + off * es, remote, bytes);
    return;
  }
  bool final = step + 1 == lay_.rs_steps;
  char* dest = final ? s_.own_out + (off - s_.seg_off[lay_.r]) * es : s_.acc + off * es;
  const char* in = s_.src + off * es;
  char* block = ctx_.ws.incoming.get(kBlockBytes);
  for (size_t b = 0; b < bytes; b += kBlockBytes) {
    size_t n = std::min(kBlockBytes, bytes - b);  // whole elements: kBlockBytes % 8 == 0
    left_.read_peer_memory(block, remote + b, n);
    reduce_pair(s_.type, s_.op, dest + b, in + b, block, n / es);
    if (final && s_.divisor > 1) divide(s_.type, dest + b, n / es, s_.divisor);
  }
}

void PullRing::run() {
  exchange_buffers();
  size_t units = lay_.units;
  std::vector<uint64_t> out(units), in(units);
  for (size_t u = 0; u < units; ++u) out[u] = u;
  // [0]: tokens from the left, [1]: tokens to the right, growing as units become ready: the
  // first k are this rank's input (or own segment); unit u + k once unit u is pulled.
  Transfer t[2] = {Transfer::recv(left_, in.data(), units * 8),
                   Transfer::send(right_, out.data(), std::min(lay_.k, units) * 8)};
  size_t pulled = 0;
  while (pulled < units) {
    bool moved = ctx_.progress.poll(t, 2);
    if (t[0].done / 8 > pulled) {
      if (in[pulled] != pulled) {
        CHORUS_THROW(IoError, "rank ", lay_.r, ": single-copy ring out of step: rank ",
                     left_rank_, " announced unit ", in[pulled], ", expected ", pulled);
      }
      pull(pulled++);
      t[1].size = std::min(units, pulled + lay_.k) * 8;
      moved = true;
    }
    if (!moved) ctx_.progress.idle(t, 2);
  }
  ctx_.progress.finish(&t[1], 1);  // before the 8 bytes below: with 2 ranks, same link
  uint64_t done = units, peer_done = 0;
  Transfer fin[2] = {Transfer::send(left_, &done, 8), Transfer::recv(right_, &peer_done, 8)};
  ctx_.progress.finish(fin, 2);
  if (peer_done != units) {
    CHORUS_THROW(IoError, "rank ", lay_.r, ": single-copy ring out of step: the right neighbour "
                 "ended after ", peer_done, " units, expected ", units);
  }
}

}  // namespace

void ring_run_single_copy(Context& ctx, const RingSpec& spec) { PullRing(ctx, spec).run(); }

bool agree_single_copy(Context& ctx) {
  barrier_dissemination(ctx);
  int64_t ok = 1;  // 8 bytes keep the links' streams aligned
  for (int peer = 0; peer < ctx.size(); ++peer) {
    if (peer != ctx.rank() && !ctx.link(peer).probe_peer_memory()) ok = 0;
  }
  allreduce_recursive_doubling(ctx, &ok, &ok, 1, DataType::kInt64, ReduceOp::kMin);
  return ok == 1;
}

}  // namespace chorus::comm
