#include "comm/ring.h"

#include <cstring>

#include "comm/algorithms.h"
#include "comm/recv_reduce.h"
#include "util/reduce.h"
#include "util/stream_copy.h"

namespace chorus::comm {
namespace {

using transport::Transfer;

// Incoming units are at most this big: bounds the scratch memory, not the pipelining
// (which works at the granularity of kReduceBlock).
constexpr size_t kChunkBytes = size_t{4} << 20;
// Bytes reduced between two polls of the outgoing stream: ~10 us of work, so the socket
// (or shared-memory ring) to the right is refilled long before it runs dry.
constexpr size_t kReduceBlock = size_t{128} << 10;
// Streaming units: a quarter of the shared-memory rings of up to 8 ranks per host, so that a
// result usually finds room in the ring to the right as it is made. 1 MiB measured best
// at 16 MiB on 2 ranks (256 KiB - 2 MiB tried: docs/benchmarks.md).
constexpr size_t kStreamingChunkBytes = size_t{1} << 20;
// A streamed result is copied out piece by piece while still in L1: 3 % faster at 16 MiB
// (7 % at 64 MiB) than copying each 128 KiB block after reducing all of it.
constexpr size_t kStreamingPieceBytes = size_t{16} << 10;

// The chunk-major ring through shared-memory rings, for cores near or far.
bool streams(RingMode mode) {
  return mode == RingMode::kStreaming || mode == RingMode::kStreamingFar;
}

class RingStream {
 public:
  RingStream(Context& ctx, const RingSpec& spec);
  void run();

 private:
  char* own_ptr(size_t off) const { return s_.own_out + (off - s_.seg_off[lay_.r]) * lay_.es; }

  void start_recv();
  void start_send();
  bool pump_recv();
  bool pump_send();
  bool send_past_cache();
  bool reduce_arrived();
  size_t reduce_streamed();
  bool gather_arrived();
  char* forward_space(size_t received, size_t* space);
  size_t recv_available() const { return recv_reduces_ ? reducer_.reduced() : xfer_[0].done; }
  size_t send_available() const;

  Context& ctx_;
  const RingSpec& s_;
  RingLayout lay_;
  transport::Link& left_;
  transport::Link& right_;
  char* incoming_ = nullptr;
  Transfer xfer_[2];  // [0]: current incoming unit, [1]: current outgoing unit
  size_t recv_unit_ = 0, send_unit_ = 0;
  size_t send_full_ = 0;  // bytes of the current outgoing unit
  bool recv_reduces_ = false, recv_final_ = false;
  bool streaming_;
  bool far_;  // kStreamingFar: bytes for the right neighbour bypass the cache too
  char* recv_dest_ = nullptr;
  RecvReduce reducer_;  // of xfer_[0] while recv_reduces_
};

RingStream::RingStream(Context& ctx, const RingSpec& spec)
    : ctx_(ctx),
      s_(spec),
      lay_(spec, ctx.rank(), ctx.size(), streams(spec.mode) ? kStreamingChunkBytes : kChunkBytes,
           streams(spec.mode)),
      left_(ctx.link(mod(ctx.rank() - 1, ctx.size()))),
      right_(ctx.link(mod(ctx.rank() + 1, ctx.size()))),
      streaming_(streams(spec.mode)),
      far_(spec.mode == RingMode::kStreamingFar) {
  if (spec.reduce_scatter) incoming_ = ctx.ws.incoming.get(lay_.max_chunk * lay_.es);
}

void RingStream::start_recv() {
  if (recv_unit_ == lay_.units) {
    xfer_[0] = Transfer{};
    return;
  }
  size_t step = lay_.step_of(recv_unit_), off, cnt;
  lay_.chunk(lay_.recv_segment(step), lay_.chunk_of(recv_unit_), &off, &cnt);
  recv_reduces_ = step < lay_.rs_steps;
  if (recv_reduces_) {
    recv_final_ = step + 1 == lay_.rs_steps;
    recv_dest_ = recv_final_ ? own_ptr(off) : s_.acc + off * lay_.es;
    xfer_[0] = Transfer::recv_message(left_, incoming_, cnt * lay_.es);
    reducer_ = RecvReduce(&xfer_[0], recv_dest_, s_.src + off * lay_.es, s_.type, s_.op);
  } else {
    xfer_[0] = Transfer::recv_message(left_, s_.acc + off * lay_.es, cnt * lay_.es);
  }
}

void RingStream::start_send() {
  if (send_unit_ == lay_.units) {
    xfer_[1] = Transfer{};
    send_full_ = 0;
    return;
  }
  size_t step = lay_.step_of(send_unit_), off, cnt;
  lay_.chunk(lay_.send_segment(step), lay_.chunk_of(send_unit_), &off, &cnt);
  const char* data = s_.acc + off * lay_.es;
  if (step == 0 && lay_.rs_steps > 0) data = s_.src + off * lay_.es;    // own input
  if (step == lay_.rs_steps && lay_.rs_steps > 0) data = own_ptr(off);  // own finished segment
  send_full_ = cnt * lay_.es;
  xfer_[1] = Transfer::send_message(right_, data, 0, send_full_);
}

size_t RingStream::send_available() const {
  if (lay_.step_of(send_unit_) == 0) return send_full_;
  size_t dep = lay_.source_of(send_unit_);
  if (dep < recv_unit_) return send_full_;
  return dep == recv_unit_ ? recv_available() : 0;
}

bool RingStream::pump_send() {
  bool moved = false;
  while (send_unit_ < lay_.units) {
    xfer_[1].size = send_available();
    if (far_ ? send_past_cache() : ctx_.progress.poll(&xfer_[1], 1)) moved = true;
    if (xfer_[1].done < send_full_) break;
    ++send_unit_;
    start_send();
    moved = true;
  }
  return moved;
}

// Far cores: the outgoing bytes go into the ring to the right with streaming stores, in
// blocks, so the neighbour reads them from memory. The plain send where the link lends no
// memory.
bool RingStream::send_past_cache() {
  Transfer& out = xfer_[1];
  bool moved = false;
  while (out.done < out.size) {
    size_t space;
    char* at = ctx_.progress.reserve_send(out, &space);
    if (at == nullptr) return ctx_.progress.poll(&out, 1) || moved;
    size_t n = std::min({space, out.size - out.done, kReduceBlock});
    if (n == 0) break;
    copy_streaming(at, out.data + out.done, n);
    ctx_.progress.commit_send(out, n);
    moved = true;
  }
  return moved;
}

bool RingStream::reduce_arrived() {
  bool any = false;
  for (;;) {
    size_t n = streaming_ && recv_final_ ? reduce_streamed() : 0;
    if (n == 0) {
      n = reducer_.pump(ctx_.progress, kReduceBlock);
      if (n == 0) break;
      if (recv_final_ && s_.divisor > 1) {
        divide(s_.type, recv_dest_ + reducer_.reduced() - n, n / lay_.es, s_.divisor);
      }
    }
    any = true;
    pump_send();
  }
  return any;
}

// Room in the ring to the right for the next outgoing bytes, when the outgoing unit is
// the one that repeats the unit being received and has sent all `received` bytes of it so
// far (then the next bytes can go out as they come in); else nullptr with *space 0.
char* RingStream::forward_space(size_t received, size_t* space) {
  *space = 0;
  bool repeats = send_unit_ < lay_.units && lay_.step_of(send_unit_) > 0 &&
                 lay_.source_of(send_unit_) == recv_unit_ && xfer_[1].done == received;
  return repeats ? ctx_.progress.reserve_send(xfer_[1], space) : nullptr;
}

// Streaming, last reduce-scatter step: the result goes straight into the outgoing ring (in
// cache), and from there with streaming stores into the caller's buffer — written once,
// never read back. Returns 0 where that cannot be done now (the ring to the right is
// full, the outgoing unit lags, or the link lends no memory): then the caller reduces into
// the buffer and the send reads it from there.
size_t RingStream::reduce_streamed() {
  // Nothing arrived: leave the ring to the right alone. A rank waiting on its left
  // neighbour must report that wait (a timeout naming it), not the right neighbour
  // aborting the link after its own, slightly earlier, deadline.
  size_t arrived = 0;
  if (ctx_.progress.peek_recv(xfer_[0], &arrived) == nullptr || arrived == 0) return 0;
  size_t space;
  char* out = forward_space(reducer_.reduced(), &space);
  if (out == nullptr || reinterpret_cast<uintptr_t>(out) % lay_.es != 0) return 0;
  size_t limit = std::min(kReduceBlock, space / lay_.es * lay_.es), total = 0;
  // Far cores: each piece is made in L1 and copied past the cache into the ring as well.
  alignas(64) char piece_buf[kStreamingPieceBytes];
  while (total < limit) {
    size_t piece = std::min(limit - total, kStreamingPieceBytes);
    char* made = far_ ? piece_buf : out + total;
    size_t n = reducer_.pump(ctx_.progress, piece, made);
    if (n == 0) break;
    if (s_.divisor > 1) divide(s_.type, made, n / lay_.es, s_.divisor);
    if (far_) copy_streaming(out + total, made, n);
    copy_streaming(recv_dest_ + reducer_.reduced() - n, made, n);
    total += n;
    if (n < piece) break;
  }
  if (total > 0) ctx_.progress.commit_send(xfer_[1], total);
  return total;
}

// Streaming allgather receive: from the incoming ring into the caller's buffer with
// streaming stores and, where the outgoing unit forwards this one and keeps up, into the
// outgoing ring as well. False when nothing arrived (or the link lends no memory: then
// the plain receive).
bool RingStream::gather_arrived() {
  Transfer& in = xfer_[0];
  size_t available = 0;
  const char* at = ctx_.progress.peek_recv(in, &available);
  if (at == nullptr) return ctx_.progress.poll(&in, 1);
  bool any = false;
  while (size_t n = std::min({available, in.size - in.done, kReduceBlock})) {
    size_t space;
    if (char* out = forward_space(in.done, &space); space > 0) {
      n = std::min(n, space);
      if (far_) {
        copy_streaming(out, at, n);
      } else {
        std::memcpy(out, at, n);
      }
      ctx_.progress.commit_send(xfer_[1], n);
    }
    copy_streaming(in.data + in.done, at, n);
    ctx_.progress.consume_recv(in, n);
    any = true;
    pump_send();
    at = ctx_.progress.peek_recv(in, &available);
  }
  return any;
}

bool RingStream::pump_recv() {
  bool moved = false;
  while (recv_unit_ < lay_.units) {
    if (recv_reduces_) {
      if (reduce_arrived()) moved = true;
      if (!reducer_.done()) break;
    } else {
      bool got = streaming_ ? gather_arrived() : ctx_.progress.poll(&xfer_[0], 1);
      if (got) moved = true;
      if (!xfer_[0].complete()) break;
    }
    ++recv_unit_;
    start_recv();
    moved = true;
  }
  return moved;
}

void RingStream::run() {
  start_recv();
  start_send();
  while (recv_unit_ < lay_.units || send_unit_ < lay_.units) {
    bool moved = pump_recv();
    if (pump_send()) moved = true;
    if (!moved) ctx_.progress.idle(xfer_, 2);
  }
}

}  // namespace

RingLayout::RingLayout(const RingSpec& spec, int rank, int size, size_t chunk_bytes,
                       bool chunk_major)
    : s(spec), p(size), r(rank), es(dtype_size(spec.type)), chunk_major(chunk_major) {
  size_t max_seg = 0;
  for (int i = 0; i < p; ++i) max_seg = std::max(max_seg, s.seg_off[i + 1] - s.seg_off[i]);
  k = std::max<size_t>(1, (max_seg * es + chunk_bytes - 1) / chunk_bytes);
  rs_steps = spec.reduce_scatter ? p - 1 : 0;
  steps = rs_steps + (spec.allgather ? p - 1 : 0);
  units = steps * k;
  max_chunk = (max_seg + k - 1) / k;
}

int RingLayout::send_segment(size_t step) const {
  if (step < rs_steps) return mod(r - 1 - static_cast<int>(step), p);
  return mod(r - static_cast<int>(step - rs_steps), p);
}

int RingLayout::recv_segment(size_t step) const {
  if (step < rs_steps) return mod(r - 2 - static_cast<int>(step), p);
  return mod(r - 1 - static_cast<int>(step - rs_steps), p);
}

void RingLayout::chunk(int seg, size_t j, size_t* off, size_t* cnt) const {
  size_t seg_count = s.seg_off[seg + 1] - s.seg_off[seg];
  *off = s.seg_off[seg] + part_offset(seg_count, k, j);
  *cnt = part_count(seg_count, k, j);
}

void ring_run(Context& ctx, const RingSpec& spec) {
  if (spec.mode == RingMode::kSingleCopy) return ring_run_single_copy(ctx, spec);
  RingStream(ctx, spec).run();
}

void allreduce_ring(Context& ctx, const void* send, void* recv, size_t count, DataType type,
                    ReduceOp op, RingMode mode) {
  int p = ctx.size();
  balanced_offsets(count, p, ctx.ws.offsets);
  RingSpec spec;
  spec.mode = mode;
  spec.seg_off = ctx.ws.offsets.data();
  spec.type = type;
  spec.op = op;
  spec.reduce_scatter = spec.allgather = true;
  spec.src = static_cast<const char*>(send);
  spec.acc = static_cast<char*>(recv);
  spec.own_out = spec.acc + ctx.ws.offsets[ctx.rank()] * dtype_size(type);
  spec.divisor = op == ReduceOp::kAverage ? p : 1;
  ring_run(ctx, spec);
}

void allreduce_ring_parts(Context& ctx, const std::vector<BufferPart>& parts, size_t count,
                          DataType type, ReduceOp op) {
  balanced_offsets(count, ctx.size(), ctx.ws.offsets);
  RingSpec spec;
  spec.mode = RingMode::kSingleCopy;
  spec.seg_off = ctx.ws.offsets.data();
  spec.type = type;
  spec.op = op;
  spec.reduce_scatter = spec.allgather = true;
  spec.parts = &parts;
  spec.divisor = op == ReduceOp::kAverage ? ctx.size() : 1;
  ring_run_single_copy(ctx, spec);
}

void allgatherv_ring(Context& ctx, const void* send, void* recv, const std::vector<size_t>& counts,
                     DataType type, RingMode mode) {
  size_t es = dtype_size(type);
  prefix_offsets(counts, ctx.ws.offsets);
  char* own = static_cast<char*>(recv) + ctx.ws.offsets[ctx.rank()] * es;
  if (own != send && counts[ctx.rank()] > 0) std::memmove(own, send, counts[ctx.rank()] * es);
  RingSpec spec;
  spec.mode = mode;
  spec.seg_off = ctx.ws.offsets.data();
  spec.type = type;
  spec.allgather = true;
  spec.acc = static_cast<char*>(recv);
  ring_run(ctx, spec);
}

void reduce_scatter_ring(Context& ctx, const void* send, void* recv,
                         const std::vector<size_t>& counts, DataType type, ReduceOp op,
                         RingMode mode) {
  size_t es = dtype_size(type);
  prefix_offsets(counts, ctx.ws.offsets);
  const size_t* off = ctx.ws.offsets.data();
  int r = ctx.rank();
  bool in_place = send == recv;
  RingSpec spec;
  spec.mode = mode;
  spec.seg_off = off;
  spec.type = type;
  spec.op = op;
  spec.reduce_scatter = true;
  spec.src = static_cast<const char*>(send);
  // In place, partial sums overwrite the input (the caller gave it up); otherwise they need
  // a buffer of their own since the caller's recv holds only block r.
  spec.acc = in_place ? static_cast<char*>(recv) : ctx.ws.accumulator.get(off[ctx.size()] * es);
  spec.own_out = in_place ? spec.acc + off[r] * es : static_cast<char*>(recv);
  spec.divisor = op == ReduceOp::kAverage ? ctx.size() : 1;
  ring_run(ctx, spec);
  if (in_place && counts[r] > 0) std::memmove(recv, spec.own_out, counts[r] * es);
}

}  // namespace chorus::comm
