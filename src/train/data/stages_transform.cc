// Element-wise transformations on the calling thread: shuffle, batch, repeat, filter,
// shard, take, skip and distribute's split (src/train/data/stages.h). Every iterator keeps
// returning nullopt once it has returned it, without asking its input again.
#include <ATen/ops/stack.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "chorus/error.h"
#include "stages.h"

namespace chorus {
namespace data_detail {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// ---- shuffle ----

// tf.data's buffer: fill, pick uniformly, replace the pick with the next input element.
// The draw is our own (rejection sampling on mt19937_64): std::uniform_int_distribution
// differs between standard libraries and every rank must pick the same.
class ShuffleIter final : public Iter {
 public:
  ShuffleIter(std::unique_ptr<Iter> in, int64_t buffer, uint64_t seed)
      : in_(std::move(in)), buffer_(buffer), gen_(seed) {}

  std::optional<Example> next() override {
    if (!filled_) fill();
    if (buf_.empty()) return std::nullopt;
    const size_t k = draw(buf_.size());
    Example out = std::move(buf_[k]);
    std::optional<Example> e = input_done_ ? std::nullopt : in_->next();
    if (e) {
      buf_[k] = std::move(*e);
    } else {
      input_done_ = true;
      if (k + 1 != buf_.size()) buf_[k] = std::move(buf_.back());
      buf_.pop_back();
    }
    return out;
  }

 private:
  void fill() {
    filled_ = true;
    buf_.reserve(static_cast<size_t>(std::min<int64_t>(buffer_, 1 << 16)));
    while (static_cast<int64_t>(buf_.size()) < buffer_) {
      std::optional<Example> e = in_->next();
      if (!e) {
        input_done_ = true;
        return;
      }
      buf_.push_back(std::move(*e));
    }
  }

  size_t draw(size_t n) {
    const uint64_t bound = n;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
      x = gen_();
    } while (x >= limit);
    return static_cast<size_t>(x % bound);
  }

  std::unique_ptr<Iter> in_;
  int64_t buffer_;
  std::mt19937_64 gen_;
  std::vector<Example> buf_;
  bool filled_ = false;
  bool input_done_ = false;
};

// ---- batch ----

class BatchIter final : public Iter {
 public:
  BatchIter(std::unique_ptr<Iter> in, int64_t size, bool drop)
      : in_(std::move(in)), size_(size), drop_(drop) {}

  std::optional<Example> next() override {
    if (done_) return std::nullopt;
    std::vector<Example> rows;
    while (static_cast<int64_t>(rows.size()) < size_) {
      std::optional<Example> e = in_->next();
      if (!e) {
        done_ = true;
        break;
      }
      rows.push_back(std::move(*e));
    }
    const int64_t first = position_;
    position_ += static_cast<int64_t>(rows.size());
    if (rows.empty() || (drop_ && static_cast<int64_t>(rows.size()) < size_)) {
      return std::nullopt;
    }
    check_rows(rows, first);
    return stack(rows);
  }

 private:
  // at::stack's own errors name neither the element nor the batch: check first.
  void check_rows(const std::vector<Example>& rows, int64_t first) const {
    const Example& ref = rows[0];
    for (size_t r = 0; r < rows.size(); ++r) {
      const Example& row = rows[r];
      CHORUS_CHECK_ARG(row.size() == ref.size(), "batch(", size_, "): element ",
                       first + static_cast<int64_t>(r), " has ", row.size(),
                       " components but element ", first, " has ", ref.size());
      for (size_t c = 0; c < row.size(); ++c) check_component(row[c], ref[c], c, first, r);
    }
  }

  void check_component(const at::Tensor& t, const at::Tensor& ref, size_t c, int64_t first,
                       size_t r) const {
    const int64_t index = first + static_cast<int64_t>(r);
    CHORUS_CHECK_ARG(t.defined(), "batch(", size_, "): element ", index, " component ", c,
                     " is undefined");
    if (r == 0) return;
    CHORUS_CHECK_ARG(t.sizes() == ref.sizes() && t.scalar_type() == ref.scalar_type() &&
                         t.device() == ref.device(),
                     "batch(", size_, "): element ", index, " (row ", r, " of batch ",
                     first / size_, ") has component ", c, " of shape ", shape_of(t), " ",
                     t.scalar_type(), " on ", t.device(), " but element ", first, " has ",
                     shape_of(ref), " ", ref.scalar_type(), " on ", ref.device(),
                     "; every element of a batch needs the same shapes");
  }

  static Example stack(const std::vector<Example>& rows) {
    Example out;
    std::vector<at::Tensor> parts(rows.size());
    for (size_t c = 0; c < rows[0].size(); ++c) {
      for (size_t r = 0; r < rows.size(); ++r) parts[r] = rows[r][c];
      out.push_back(at::stack(parts, 0));
    }
    return out;
  }

  std::unique_ptr<Iter> in_;
  int64_t size_;
  bool drop_;
  bool done_ = false;
  int64_t position_ = 0;  // input elements consumed, for messages
};

// ---- repeat ----

class RepeatIter final : public Iter {
 public:
  RepeatIter(Stage::Ptr input, int64_t count, Context ctx)
      : input_(std::move(input)), count_(count), ctx_(ctx) {}

  std::optional<Example> next() override {
    while (!done_) {
      if (!current_ && !start_repetition()) break;
      if (std::optional<Example> e = current_->next()) {
        produced_ = true;
        return e;
      }
      current_.reset();
      ++rep_;
      // Forever over an empty repetition would spin forever: stop instead (as tf.data).
      if (count_ < 0 && !produced_) done_ = true;
    }
    done_ = true;
    return std::nullopt;
  }

 private:
  bool start_repetition() {
    if (count_ >= 0 && rep_ >= count_) return false;
    Context child = ctx_;
    // Repetition 0 keeps the context: the first pass equals the dataset without repeat().
    if (rep_ > 0) child.repetition = mix_seed(ctx_.repetition, static_cast<uint64_t>(rep_));
    current_ = input_->make(child);
    produced_ = false;
    return true;
  }

  Stage::Ptr input_;
  int64_t count_;
  Context ctx_;
  std::unique_ptr<Iter> current_;
  int64_t rep_ = 0;
  bool produced_ = false;
  bool done_ = false;
};

// ---- filter ----

class FilterIter final : public Iter {
 public:
  FilterIter(std::unique_ptr<Iter> in, std::function<bool(const Example&)> pred)
      : in_(std::move(in)), pred_(std::move(pred)) {}

  std::optional<Example> next() override {
    while (!done_) {
      std::optional<Example> e = in_->next();
      if (!e) break;
      if (pred_(*e)) return e;
    }
    done_ = true;
    return std::nullopt;
  }

 private:
  std::unique_ptr<Iter> in_;
  std::function<bool(const Example&)> pred_;
  bool done_ = false;
};

// ---- shard, take, skip ----

// Returns input positions first, first + stride, ... below `end` (-1: no end).
class StrideIter final : public Iter {
 public:
  StrideIter(std::unique_ptr<Iter> in, int64_t first, int64_t stride, int64_t end)
      : in_(std::move(in)), first_(first), stride_(stride), end_(end) {}

  std::optional<Example> next() override {
    const int64_t target = returned_ == 0 ? first_ : position_ + stride_ - 1;
    if (done_ || (end_ >= 0 && target >= end_)) return finish();
    while (position_ < target) {
      if (!in_->next()) return finish();
      ++position_;
    }
    std::optional<Example> e = in_->next();
    if (!e) return finish();
    ++position_;
    ++returned_;
    return e;
  }

 private:
  std::optional<Example> finish() {
    done_ = true;
    return std::nullopt;
  }

  std::unique_ptr<Iter> in_;
  int64_t first_, stride_, end_;
  int64_t position_ = 0;  // input elements consumed
  int64_t returned_ = 0;
  bool done_ = false;
};

// ---- distribute(kData) ----

class SplitIter final : public Iter {
 public:
  SplitIter(std::unique_ptr<Iter> in, int workers, int index)
      : in_(std::move(in)), workers_(workers), index_(index) {}

  std::optional<Example> next() override {
    std::optional<Example> batch = in_->next();
    if (!batch) return std::nullopt;
    return split_chunk(*batch, workers_, index_, "distribute");
  }

 private:
  std::unique_ptr<Iter> in_;
  int workers_, index_;
};

// Cardinality of `c` elements after keeping one in `every` from `first`.
int64_t strided(int64_t c, int64_t first, int64_t every) {
  if (c < 0) return c;
  return c <= first ? 0 : (c - first + every - 1) / every;
}

}  // namespace

// ---- stages ----

ShuffleStage::ShuffleStage(Ptr in, int64_t b, uint64_t s, bool r)
    : StageImpl(std::move(in)), buffer(b), seed(s), reshuffle(r) {
  CHORUS_CHECK_ARG(buffer > 0, "shuffle: buffer_size must be positive, got ", buffer);
}

std::unique_ptr<Iter> ShuffleStage::make(const Context& ctx) const {
  uint64_t s = mix_seed(seed, 0);
  if (reshuffle) {
    s = mix_seed(mix_seed(s, static_cast<uint64_t>(ctx.epoch)), ctx.repetition);
  }
  return std::make_unique<ShuffleIter>(make_input(ctx), buffer, s);
}

std::string ShuffleStage::describe() const {
  return "shuffle(" + std::to_string(buffer) + ", seed " + std::to_string(seed) +
         (reshuffle ? ")" : ", same order each iteration)");
}

BatchStage::BatchStage(Ptr in, int64_t s, bool d) : StageImpl(std::move(in)), size(s), drop(d) {
  CHORUS_CHECK_ARG(size > 0, "batch: batch_size must be positive, got ", size);
}

std::unique_ptr<Iter> BatchStage::make(const Context& ctx) const {
  return std::make_unique<BatchIter>(make_input(ctx), size, drop);
}

int64_t BatchStage::cardinality() const {
  const int64_t c = input_cardinality();
  if (c < 0) return c;
  return drop ? c / size : (c + size - 1) / size;
}

std::string BatchStage::describe() const {
  std::string out = "batch(" + std::to_string(size) + (drop ? ", drop_remainder" : "");
  if (!distributed.empty()) out += "; distributed " + distributed;
  return out + ")";
}

RepeatStage::RepeatStage(Ptr in, int64_t c) : StageImpl(std::move(in)), count(c) {
  CHORUS_CHECK_ARG(count >= -1, "repeat: count must be -1 (forever) or >= 0, got ", count);
}

std::unique_ptr<Iter> RepeatStage::make(const Context& ctx) const {
  return std::make_unique<RepeatIter>(input_, count, ctx);
}

int64_t RepeatStage::cardinality() const {
  const int64_t c = input_cardinality();
  if (count == 0 || c == 0) return 0;
  if (count < 0) return kInfiniteCardinality;
  return c < 0 ? c : c * count;
}

std::string RepeatStage::describe() const {
  return count < 0 ? "repeat" : "repeat(" + std::to_string(count) + ")";
}

FilterStage::FilterStage(Ptr in, std::function<bool(const Example&)> p)
    : StageImpl(std::move(in)), pred(std::move(p)) {
  CHORUS_CHECK_ARG(pred, "filter: no predicate");
}

std::unique_ptr<Iter> FilterStage::make(const Context& ctx) const {
  return std::make_unique<FilterIter>(make_input(ctx), pred);
}

int64_t FilterStage::cardinality() const {
  return input_cardinality() == 0 ? 0 : kUnknownCardinality;
}

ShardStage::ShardStage(Ptr in, int64_t n, int64_t i)
    : StageImpl(std::move(in)), num_shards(n), index(i) {
  CHORUS_CHECK_ARG(num_shards > 0, "shard: num_shards must be positive, got ", num_shards);
  CHORUS_CHECK_ARG(index >= 0 && index < num_shards, "shard: index ", index, " outside [0, ",
                   num_shards, ")");
}

std::unique_ptr<Iter> ShardStage::make(const Context& ctx) const {
  return std::make_unique<StrideIter>(make_input(ctx), index, num_shards, -1);
}

int64_t ShardStage::cardinality() const { return strided(input_cardinality(), index, num_shards); }

std::string ShardStage::describe() const {
  return "shard(" + std::to_string(num_shards) + ", " + std::to_string(index) + ")";
}

TakeStage::TakeStage(Ptr in, int64_t count) : StageImpl(std::move(in)), n(count) {
  CHORUS_CHECK_ARG(n >= -1, "take: n must be -1 (all) or >= 0, got ", n);
}

std::unique_ptr<Iter> TakeStage::make(const Context& ctx) const {
  return std::make_unique<StrideIter>(make_input(ctx), 0, 1, n);
}

int64_t TakeStage::cardinality() const {
  const int64_t c = input_cardinality();
  if (n < 0 || c == kUnknownCardinality) return c;
  return c == kInfiniteCardinality ? n : std::min(c, n);
}

std::string TakeStage::describe() const { return "take(" + std::to_string(n) + ")"; }

SkipStage::SkipStage(Ptr in, int64_t count) : StageImpl(std::move(in)), n(count) {
  CHORUS_CHECK_ARG(n >= -1, "skip: n must be -1 (everything) or >= 0, got ", n);
}

std::unique_ptr<Iter> SkipStage::make(const Context& ctx) const {
  // skip(-1) skips everything: no need to read (an infinite input would never end).
  if (n < 0) return std::make_unique<StrideIter>(make_input(ctx), 0, 1, 0);
  return std::make_unique<StrideIter>(make_input(ctx), n, 1, -1);
}

int64_t SkipStage::cardinality() const {
  const int64_t c = input_cardinality();
  if (n < 0) return 0;
  return c < 0 ? c : std::max<int64_t>(0, c - n);
}

std::string SkipStage::describe() const { return "skip(" + std::to_string(n) + ")"; }

SplitStage::SplitStage(Ptr in, int w, int i, int64_t b)
    : StageImpl(std::move(in)), workers(w), index(i), global_batch(b) {}

std::unique_ptr<Iter> SplitStage::make(const Context& ctx) const {
  return std::make_unique<SplitIter>(make_input(ctx), workers, index);
}

std::string SplitStage::describe() const {
  return "distribute(DATA, worker " + std::to_string(index) + " of " + std::to_string(workers) +
         ", batch " + std::to_string(global_batch / workers) + ")";
}

Example split_chunk(const Example& batch, int parts, int k, const char* what) {
  CHORUS_CHECK_ARG(parts >= 1, what, ": parts must be positive, got ", parts);
  Example out;
  out.reserve(batch.size());
  for (size_t c = 0; c < batch.size(); ++c) {
    const at::Tensor& t = batch[c];
    CHORUS_CHECK_ARG(t.defined() && t.dim() >= 1, what, ": component ", c,
                     " has no dimension 0 to split (a batch needs one)");
    CHORUS_CHECK_ARG(t.size(0) == batch[0].size(0), what, ": component ", c, " has shape ",
                     shape_of(t), " but component 0 has ", shape_of(batch[0]),
                     "; size(0) must match");
    const int64_t n = t.size(0), base = n / parts, extra = n % parts;
    const int64_t start = k * base + std::min<int64_t>(k, extra);
    out.push_back(t.narrow(0, start, base + (k < extra ? 1 : 0)));
  }
  return out;
}

}  // namespace data_detail
}  // namespace chorus
