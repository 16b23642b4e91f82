// The direct single-copy allreduce (algorithms.h): rank r owns part r of the call and, a
// block at a time, reads that block of every peer's input (process_vm_readv) into a
// cache-sized scratch, reduces it with its own into its output, and writes the result into
// every peer's output (process_vm_writev) while it is still in cache. Every element crosses
// memory about once on the way in and once on the way out, and no rank waits for another
// between the start and the end. On each link, per call, both ways:
//   n, the number of buffers (1, or the parts with elements), the call's signature, its
//   element count, then per buffer its send and recv addresses and its bytes;
//   at the end, the element count again, once every read and write of the sender is done,
//   so that no rank returns while a peer still reads or writes its buffers.
// A rank writes only where its peer said its output lies, and only after the calls were
// compared: ranks given different calls all get an IoError before any byte is written.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "chorus/error.h"
#include "comm/algorithms.h"
#include "util/reduce.h"

namespace chorus::comm {
namespace {

using transport::PeerCopy;
using transport::Transfer;

// Blocks of 64 to 512 KiB ran within 15 % of each other in a two-process probe (16 MiB in
// place, Intel Xeon VM, 2026-11-27), 1 MiB slower; 256 KiB was the fastest and stays in L2
// while it is reduced.
constexpr size_t kBlockBytes = size_t{256} << 10;
constexpr size_t kHead = 3, kPer = 3;  // [n, signature, count], then (send, recv, bytes) each
// Marks the signature as this algorithm's, so that a peer running another path is caught.
constexpr uint64_t kDirectTag = uint64_t{0xd1} << 32;

class DirectAllreduce {
 public:
  DirectAllreduce(Context& ctx, const std::vector<BufferPart>& parts, size_t count, DataType type,
                  ReduceOp op);
  void run();

 private:
  void exchange();
  void check_peer(int q, const uint64_t* theirs) const;
  void reduce_block(size_t from, size_t bytes, char* scratch);
  void finish();
  // Calls f(piece, offset in it, offset in [from, from + bytes), length) for each piece
  // that [from, from + bytes) of the layout crosses.
  template <typename F>
  void for_segments(size_t from, size_t bytes, F&& f) const;

  Context& ctx_;
  const int p_, me_;
  const size_t count_, es_;
  const DataType type_;
  const ReduceOp op_;
  // The layout as bytes: piece i holds [start_[i], start_[i + 1]), at send_[i] / recv_[i]
  // here and, by peer, at peer_send_[q][i] / peer_recv_[q][i]. Every rank has the same.
  std::vector<size_t> start_{0};
  std::vector<const char*> send_;
  std::vector<char*> recv_;
  std::vector<std::vector<uint64_t>> peer_send_, peer_recv_;
  std::vector<uint64_t> mine_;  // this rank's descriptor, as sent
  std::vector<PeerCopy> copies_;
};

DirectAllreduce::DirectAllreduce(Context& ctx, const std::vector<BufferPart>& parts, size_t count,
                                 DataType type, ReduceOp op)
    : ctx_(ctx),
      p_(ctx.size()),
      me_(ctx.rank()),
      count_(count),
      es_(dtype_size(type)),
      type_(type),
      op_(op),
      peer_send_(p_),
      peer_recv_(p_) {
  for (const BufferPart& part : parts) {
    if (part.count == 0) continue;
    send_.push_back(static_cast<const char*>(part.send));
    recv_.push_back(static_cast<char*>(part.recv));
    start_.push_back(start_.back() + part.count * es_);
  }
  size_t n = send_.size();
  mine_ = {n, kDirectTag | static_cast<uint64_t>(type) | static_cast<uint64_t>(op) << 8, count};
  for (size_t i = 0; i < n; ++i) {
    mine_.push_back(reinterpret_cast<uintptr_t>(send_[i]));
    mine_.push_back(reinterpret_cast<uintptr_t>(recv_[i]));
    mine_.push_back(start_[i + 1] - start_[i]);
  }
}

template <typename F>
void DirectAllreduce::for_segments(size_t from, size_t bytes, F&& f) const {
  for (size_t x = from, end = from + bytes; x < end;) {
    size_t i =
        static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), x) - start_.begin()) - 1;
    size_t len = std::min(end, start_[i + 1]) - x;
    f(i, x - start_[i], x - from, len);
    x += len;
  }
}

void DirectAllreduce::check_peer(int q, const uint64_t* theirs) const {
  if (theirs[1] != mine_[1]) {
    CHORUS_THROW(IoError, "rank ", me_, ": direct single-copy allreduce: rank ", q,
                 " runs another kind of call (algorithm, data type or reduce op differ)");
  }
  if (theirs[0] != mine_[0] || theirs[2] != mine_[2]) {
    CHORUS_THROW(IoError, "rank ", me_, ": direct single-copy allreduce: rank ", q, " has ",
                 theirs[2], " elements in ", theirs[0], " buffers, this rank ", mine_[2], " in ",
                 mine_[0], " (different calls on different ranks?)");
  }
}

// Every peer's addresses, after its head matched ours (so that what follows has our length
// and nothing is sized by what a peer sent); then every buffer's bytes are compared.
void DirectAllreduce::exchange() {
  std::vector<uint64_t> theirs(static_cast<size_t>(p_) * mine_.size());
  std::vector<Transfer> t;
  auto from = [&](int q) { return theirs.data() + static_cast<size_t>(q) * mine_.size(); };
  for (int q = 0; q < p_; ++q) {
    if (q == me_) continue;
    t.push_back(Transfer::send(ctx_.link(q), mine_.data(), mine_.size() * 8));
    t.push_back(Transfer::recv(ctx_.link(q), from(q), kHead * 8));
  }
  ctx_.progress.finish(t.data(), t.size());
  t.clear();
  for (int q = 0; q < p_; ++q) {
    if (q == me_) continue;
    check_peer(q, from(q));
    t.push_back(Transfer::recv(ctx_.link(q), from(q) + kHead, (mine_.size() - kHead) * 8));
  }
  ctx_.progress.finish(t.data(), t.size());
  for (int q = 0; q < p_; ++q) {
    if (q == me_) continue;
    for (size_t i = 0; i < send_.size(); ++i) {
      const uint64_t* piece = from(q) + kHead + kPer * i;
      if (piece[2] != mine_[kHead + kPer * i + 2]) {
        CHORUS_THROW(IoError, "rank ", me_, ": direct single-copy allreduce: buffer ", i,
                     " of rank ", q, " has ", piece[2], " bytes, this rank's ",
                     mine_[kHead + kPer * i + 2], " (different parts on different ranks?)");
      }
      peer_send_[q].push_back(piece[0]);
      peer_recv_[q].push_back(piece[1]);
    }
  }
  // Every rank compares its call with every other's, and equal calls are equal throughout:
  // where any two ranks differ, every rank differs from one of them and throws here, before
  // anything is written.
}

// Block [from, from + bytes) of this rank's part: the peers' inputs one after another into
// `scratch`, reduced into this rank's output, which then goes to every peer's output.
void DirectAllreduce::reduce_block(size_t from, size_t bytes, char* scratch) {
  const bool average = op_ == ReduceOp::kAverage;
  for (int k = 1; k < p_; ++k) {
    int q = (me_ + k) % p_;  // ranks start on different peers
    copies_.clear();
    for_segments(from, bytes, [&](size_t i, size_t in, size_t at, size_t len) {
      copies_.push_back(PeerCopy{scratch + at, peer_send_[q][i] + in, len});
    });
    ctx_.progress.read_peer_memory(ctx_.link(q), copies_.data(), copies_.size());
    for_segments(from, bytes, [&](size_t i, size_t in, size_t at, size_t len) {
      char* out = recv_[i] + in;
      const char* theirs = scratch + at;
      size_t n = len / es_;
      if (k > 1) {
        reduce_into(type_, op_, out, theirs, n);
      } else if (average && p_ == 2) {
        reduce_pair_divided(type_, op_, out, send_[i] + in, theirs, n, p_);
      } else {
        reduce_pair(type_, op_, out, send_[i] + in, theirs, n);
      }
    });
  }
  if (average && p_ > 2) {
    for_segments(from, bytes, [&](size_t i, size_t in, size_t, size_t len) {
      divide(type_, recv_[i] + in, len / es_, p_);
    });
  }
  for (int k = 1; k < p_; ++k) {
    int q = (me_ + k) % p_;
    copies_.clear();
    for_segments(from, bytes, [&](size_t i, size_t in, size_t, size_t len) {
      copies_.push_back(PeerCopy{recv_[i] + in, peer_recv_[q][i] + in, len});
    });
    ctx_.progress.write_peer_memory(ctx_.link(q), copies_.data(), copies_.size());
  }
}

void DirectAllreduce::finish() {
  const uint64_t done = count_;  // every send reads the same word
  std::vector<uint64_t> got(static_cast<size_t>(p_), 0);
  std::vector<Transfer> t;
  for (int q = 0; q < p_; ++q) {
    if (q == me_) continue;
    t.push_back(Transfer::send(ctx_.link(q), &done, 8));
    t.push_back(Transfer::recv(ctx_.link(q), &got[q], 8));
  }
  ctx_.progress.finish(t.data(), t.size());
  for (int q = 0; q < p_; ++q) {
    if (q != me_ && got[q] != count_) {
      CHORUS_THROW(IoError, "rank ", me_, ": direct single-copy allreduce out of step: rank ", q,
                   " ended a call of ", got[q], " elements, this rank ", count_);
    }
  }
}

void DirectAllreduce::run() {
  exchange();
  size_t lo = part_offset(count_, p_, me_) * es_;
  size_t hi = lo + part_count(count_, p_, me_) * es_;
  size_t block = kBlockBytes / es_ * es_;
  char* scratch = ctx_.ws.incoming.get(block);
  for (size_t b = lo; b < hi; b += block) reduce_block(b, std::min(block, hi - b), scratch);
  finish();
}

}  // namespace

bool every_rank_in_place(Context& ctx, const void* send, const void* recv) {
  int64_t in_place = send == recv ? 1 : 0;  // 8 bytes keep the links' streams aligned
  allreduce_recursive_doubling(ctx, &in_place, &in_place, 1, DataType::kInt64, ReduceOp::kMin);
  return in_place == 1;
}

void allreduce_direct(Context& ctx, const std::vector<BufferPart>& parts, size_t count,
                      DataType type, ReduceOp op) {
  DirectAllreduce(ctx, parts, count, type, op).run();
}

}  // namespace chorus::comm
