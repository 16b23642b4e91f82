// The single-copy ring (ring.h): the same units in the same order as the byte stream, but a
// unit moves by the receiver copying it out of the sender's buffers (process_vm_readv)
// once the sender says it is ready. On each link, per call:
//   sender -> receiver: n, the number of buffers its layout has (1, or the parts with
//                       elements), the call's signature (dtype, op, phases), then per
//                       buffer its src and acc addresses and its bytes; then one 8-byte
//                       token per unit (its number) as the unit becomes ready;
//   receiver -> sender: 8 bytes once it has read everything, so that the sender's buffers
//                       stay untouched until nobody reads them.
// Every message is a multiple of 8 bytes, keeping the links' streams aligned for the next
// call. Reductions read the peer's data into a cache-sized block of scratch, so each
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

using transport::PeerCopy;
using transport::Transfer;

// A unit is announced when it is whole, so units bound how early the right neighbour can
// start on data this rank has just produced: 1 MiB keeps both ranks busy from the first
// microseconds of a 16 MiB call.
constexpr size_t kUnitBytes = size_t{1} << 20;
// Peer data to be reduced is read in blocks that stay in the L2 cache for the reduction.
constexpr size_t kBlockBytes = size_t{256} << 10;

// The full layout as buffers: piece i holds bytes [start[i], start[i + 1]) of it, at src[i]
// and acc[i] here and at the left neighbour's peer_src[i] / peer_acc[i]. Every rank has the
// same counts, so the same starts.
struct Pieces {
  std::vector<size_t> start;
  std::vector<const char*> src;
  std::vector<char*> acc;
  std::vector<uint64_t> peer_src, peer_acc;

  size_t find(size_t x) const {
    return static_cast<size_t>(std::upper_bound(start.begin(), start.end(), x) - start.begin()) - 1;
  }
};

class PullRing {
 public:
  PullRing(Context& ctx, const RingSpec& spec);
  void run();

 private:
  void exchange_buffers();
  void pull(size_t u);
  void pull_reduced(size_t from, size_t bytes, bool final, bool from_input);
  // Appends to copies_ the pieces of [from, from + bytes) of the left's src or acc, landing
  // at `local` (contiguous) or, when local is null, at the same place of this rank's acc.
  void collect(size_t from, size_t bytes, bool peer_src, char* local);
  // Where byte x of the full layout goes when this rank finishes (final) or accumulates it.
  char* dest_at(size_t x, bool final) const;

  Context& ctx_;
  const RingSpec& s_;
  RingLayout lay_;
  int left_rank_;
  transport::Link& left_;
  transport::Link& right_;
  Pieces pieces_;
  std::vector<PeerCopy> copies_;
};

PullRing::PullRing(Context& ctx, const RingSpec& spec)
    : ctx_(ctx),
      s_(spec),
      lay_(spec, ctx.rank(), ctx.size(), kUnitBytes),
      left_rank_(mod(ctx.rank() - 1, ctx.size())),
      left_(ctx.link(left_rank_)),
      right_(ctx.link(mod(ctx.rank() + 1, ctx.size()))) {
  size_t total = s_.seg_off[ctx.size()] * lay_.es;
  pieces_.start.push_back(0);
  if (s_.parts == nullptr) {
    pieces_.src.push_back(s_.src);
    pieces_.acc.push_back(s_.acc);
    pieces_.start.push_back(total);
    return;
  }
  for (const BufferPart& part : *s_.parts) {
    if (part.count == 0) continue;
    pieces_.src.push_back(static_cast<const char*>(part.send));
    pieces_.acc.push_back(static_cast<char*>(part.recv));
    pieces_.start.push_back(pieces_.start.back() + part.count * lay_.es);
  }
}

// What this call is, as the left neighbour must see it too: data type, reduce op, and which
// phases run. With the byte lengths of the pieces it makes sure that a rank never reads past
// a peer's buffer or mixes different calls, whatever arguments the ranks were given.
uint64_t call_signature(const RingSpec& s) {
  return static_cast<uint64_t>(s.type) | static_cast<uint64_t>(s.op) << 8 |
         uint64_t{s.reduce_scatter} << 16 | uint64_t{s.allgather} << 17;
}

void PullRing::exchange_buffers() {
  constexpr size_t kHead = 2, kPer = 3;  // [n, signature], then (src, acc, bytes) per piece
  size_t n = pieces_.src.size();
  std::vector<uint64_t> mine(kHead + kPer * n), theirs(kHead + kPer * n);
  mine[0] = n;
  mine[1] = call_signature(s_);
  for (size_t i = 0; i < n; ++i) {
    mine[kHead + kPer * i] = reinterpret_cast<uintptr_t>(pieces_.src[i]);
    mine[kHead + kPer * i + 1] = reinterpret_cast<uintptr_t>(pieces_.acc[i]);
    mine[kHead + kPer * i + 2] = pieces_.start[i + 1] - pieces_.start[i];
  }
  Transfer t[2] = {Transfer::send(right_, mine.data(), mine.size() * 8),
                   Transfer::recv(left_, theirs.data(), 8)};
  ctx_.progress.finish(t, 2);
  if (theirs[0] != n) {
    CHORUS_THROW(IoError, "rank ", lay_.r, ": single-copy ring out of step: rank ", left_rank_,
                 " has ", theirs[0], " buffers, this rank ", n, " (different calls?)");
  }
  t[1] = Transfer::recv(left_, theirs.data() + 1, (theirs.size() - 1) * 8);
  ctx_.progress.finish(&t[1], 1);
  if (theirs[1] != mine[1]) {
    CHORUS_THROW(IoError, "rank ", lay_.r, ": single-copy ring: rank ", left_rank_,
                 " runs another kind of call (data type, reduce op or phases differ)");
  }
  pieces_.peer_src.resize(n);
  pieces_.peer_acc.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t* piece = &theirs[kHead + kPer * i];
    const uint64_t bytes = mine[kHead + kPer * i + 2];
    if (piece[2] != bytes) {
      CHORUS_THROW(IoError, "rank ", lay_.r, ": single-copy ring: buffer ", i, " of rank ",
                   left_rank_, " has ", piece[2], " bytes, this rank's ", bytes,
                   " (different counts on different ranks?)");
    }
    pieces_.peer_src[i] = piece[0];
    pieces_.peer_acc[i] = piece[1];
  }
}

void PullRing::collect(size_t from, size_t bytes, bool peer_src, char* local) {
  const std::vector<uint64_t>& remote = peer_src ? pieces_.peer_src : pieces_.peer_acc;
  for (size_t x = from, end = from + bytes; x < end;) {
    size_t i = pieces_.find(x);
    size_t in = x - pieces_.start[i], n = std::min(end, pieces_.start[i + 1]) - x;
    char* to = local ? local + (x - from) : pieces_.acc[i] + in;
    copies_.push_back(PeerCopy{to, remote[i] + in, n});
    x += n;
  }
}

char* PullRing::dest_at(size_t x, bool final) const {
  if (final && s_.parts == nullptr) return s_.own_out + (x - s_.seg_off[lay_.r] * lay_.es);
  size_t i = pieces_.find(x);
  return pieces_.acc[i] + (x - pieces_.start[i]);
}

// Reduces [from, from + bytes) of the left's buffer into this rank's, a block at a time:
// dest = op(own input, the left's src (step 0) or acc).
void PullRing::pull_reduced(size_t from, size_t bytes, bool final, bool from_input) {
  char* block = ctx_.ws.incoming.get(kBlockBytes);
  size_t es = lay_.es;
  for (size_t b = from, end = from + bytes; b < end; b += kBlockBytes) {
    size_t n = std::min(kBlockBytes, end - b);  // whole elements: kBlockBytes % 8 == 0
    copies_.clear();
    collect(b, n, from_input, block);
    ctx_.progress.read_peer_memory(left_, copies_.data(), copies_.size());
    // Piece by piece: the input and the destination may break at different bytes.
    for (size_t x = b; x < b + n;) {
      size_t i = pieces_.find(x);
      size_t len = std::min(b + n, pieces_.start[i + 1]) - x;
      char* dest = dest_at(x, final);
      const char* own = pieces_.src[i] + (x - pieces_.start[i]);
      if (final && s_.divisor > 1) {
        reduce_pair_divided(s_.type, s_.op, dest, own, block + (x - b), len / es, s_.divisor);
      } else {
        reduce_pair(s_.type, s_.op, dest, own, block + (x - b), len / es);
      }
      x += len;
    }
  }
}

void PullRing::pull(size_t u) {
  size_t step = u / lay_.k, off, cnt;
  lay_.chunk(lay_.recv_segment(step), u % lay_.k, &off, &cnt);
  size_t from = off * lay_.es, bytes = cnt * lay_.es;
  if (step < lay_.rs_steps) {
    return pull_reduced(from, bytes, step + 1 == lay_.rs_steps, step == 0);
  }
  // Allgather: the left's finished bytes, from its acc (its own segment is there too: every
  // ring with an allgather has own_out inside acc) straight into ours.
  copies_.clear();
  collect(from, bytes, false, nullptr);
  ctx_.progress.read_peer_memory(left_, copies_.data(), copies_.size());
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
        CHORUS_THROW(IoError, "rank ", lay_.r, ": single-copy ring out of step: rank ", left_rank_,
                     " announced unit ", in[pulled], ", expected ", pulled);
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
    CHORUS_THROW(IoError, "rank ", lay_.r,
                 ": single-copy ring out of step: the right neighbour "
                 "ended after ",
                 peer_done, " units, expected ", units);
  }
}

}  // namespace

void ring_run_single_copy(Context& ctx, const RingSpec& spec) { PullRing(ctx, spec).run(); }

bool agree_single_copy(Context& ctx) {
  barrier_dissemination(ctx);
  int64_t ok = 1;  // 8 bytes keep the links' streams aligned
  for (int peer = 0; peer < ctx.size(); ++peer) {
    if (peer == ctx.rank()) continue;
    transport::PeerMemory* memory = ctx.link(peer).peer_memory();
    if (memory == nullptr || !memory->probe()) ok = 0;
  }
  allreduce_recursive_doubling(ctx, &ok, &ok, 1, DataType::kInt64, ReduceOp::kMin);
  return ok == 1;
}

}  // namespace chorus::comm
