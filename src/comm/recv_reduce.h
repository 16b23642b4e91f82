// Receiving a message and reducing it into place in one pass: dest = op(in, received).
//
// When the link lends its receive memory (Link::peek_recv: a shared-memory ring, a TCP
// link's staging buffer) the reduction
// reads the bytes where they arrived, in the ring, and hands them back afterwards — no
// write of every byte into scratch memory and read back. Otherwise (TCP) the bytes are
// received into scratch first. The in-place path needs the bytes aligned for the element
// type: a ring's stream position is misaligned after messages of odd sizes (a barrier sends
// one byte), and then the whole message goes through scratch. An aligned position never
// cuts an element at the ring's wrap point (the ring size is a multiple of every element
// size), but should a link report fewer contiguous bytes than an element, the rest of the
// message also falls back to scratch — switching is free since nothing was buffered yet.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "chorus/dtype.h"
#include "transport/progress.h"
#include "util/reduce.h"

namespace chorus::comm {

class RecvReduce {
 public:
  RecvReduce() = default;
  // `t` is the receive (Transfer::recv into scratch of t->size bytes, which the fallback
  // uses) and stays owned by the caller, who passes it to Progress::idle. Its `done` counts
  // bytes taken from the link; reduced() those already in dest.
  RecvReduce(transport::Transfer* t, char* dest, const char* in, DataType type, ReduceOp op)
      : t_(t), dest_(dest), in_(in), type_(type), op_(op), es_(dtype_size(type)) {}

  // Takes what has arrived and reduces up to max_bytes more of it (whole elements), into
  // dest or, when `out` is given, into out[0 ..) instead (the caller moves them to dest).
  // Returns the bytes reduced by this call.
  size_t pump(transport::Progress& progress, size_t max_bytes, char* out = nullptr) {
    size_t before = reduced_;
    size_t end = reduced_ + std::min(max_bytes, t_->size - reduced_);
    out_ = out;
    out_from_ = before;
    if (mode_ == Mode::kUndecided) decide(progress);
    if (mode_ == Mode::kInPlace) reduce_in_place(progress, end);
    if (mode_ == Mode::kScratch) reduce_from_scratch(progress, end);
    return reduced_ - before;
  }

  size_t reduced() const { return reduced_; }
  bool done() const { return reduced_ == t_->size; }

 private:
  enum class Mode { kUndecided, kInPlace, kScratch };

  char* target() const { return out_ ? out_ + (reduced_ - out_from_) : dest_ + reduced_; }

  void decide(transport::Progress& progress) {
    if (t_->size == 0) return;
    size_t available;
    const char* at = progress.peek_recv(*t_, &available);
    bool aligned = at != nullptr && reinterpret_cast<uintptr_t>(at) % es_ == 0;
    mode_ = aligned ? Mode::kInPlace : Mode::kScratch;
  }

  void reduce_in_place(transport::Progress& progress, size_t end) {
    while (reduced_ < end) {
      size_t available;
      const char* at = progress.peek_recv(*t_, &available);
      size_t n = std::min(available, end - reduced_) / es_ * es_;
      if (n == 0) {
        // An element cut at the link's wrap point: the rest goes through scratch.
        if (available > 0 && available < es_ && available < end - reduced_) {
          mode_ = Mode::kScratch;
        }
        return;
      }
      reduce_pair(type_, op_, target(), in_ + reduced_, at, n / es_);
      progress.consume_recv(*t_, n);
      reduced_ += n;
    }
  }

  void reduce_from_scratch(transport::Progress& progress, size_t end) {
    progress.poll(t_, 1);
    size_t ready = std::min(end, t_->done / es_ * es_);
    if (ready <= reduced_) return;
    reduce_pair(type_, op_, target(), in_ + reduced_, t_->data + reduced_,
                (ready - reduced_) / es_);
    reduced_ = ready;
  }

  transport::Transfer* t_ = nullptr;
  char* dest_ = nullptr;
  char* out_ = nullptr;  // this pump's `out`: it receives bytes from out_from_ on
  size_t out_from_ = 0;
  const char* in_ = nullptr;
  DataType type_ = DataType::kUInt8;
  ReduceOp op_ = ReduceOp::kSum;
  size_t es_ = 1;
  size_t reduced_ = 0;
  Mode mode_ = Mode::kUndecided;
};

}  // namespace chorus::comm
