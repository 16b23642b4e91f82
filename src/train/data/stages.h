// The stage graph behind chorus::Dataset (include/chorus/train/dataset.h).
//
// A Dataset holds the last Stage of a linear chain; each stage holds its input (sources
// none). Stages are immutable and shared between Datasets. make() builds the iterator of a
// pass: it makes the input's iterator and wraps it, so an iterator owns its whole chain
// and copies (or shares) whatever state it reads — it never points back into a Stage.
// distribute() rewrites a chain by copying stages onto new inputs (with_input).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/train/dataset.h"

namespace chorus {
namespace data_detail {

// What a pass is: the epoch given to iterate() and, for stages below a repeat(), which
// repetition (a hash over every enclosing repeat's counter). Shuffles seed from both.
struct Context {
  int64_t epoch = 0;
  uint64_t repetition = 0;
};

class Iter {
 public:
  virtual ~Iter() = default;
  // The next element, nullopt at the end; throws what the stage or its input throws.
  virtual std::optional<Example> next() = 0;
};

class Stage {
 public:
  using Ptr = std::shared_ptr<const Stage>;
  explicit Stage(Ptr input) : input_(std::move(input)) {}
  virtual ~Stage() = default;

  const Ptr& input() const { return input_; }
  virtual std::unique_ptr<Iter> make(const Context& ctx) const = 0;
  virtual int64_t cardinality() const = 0;
  virtual std::string describe() const = 0;     // this stage alone
  virtual Ptr with_input(Ptr input) const = 0;  // a copy of this stage reading `input`

 protected:
  // The input's iterator (REQUIRES: input_).
  std::unique_ptr<Iter> make_input(const Context& ctx) const { return input_->make(ctx); }
  int64_t input_cardinality() const { return input_->cardinality(); }

  Ptr input_;
};

// with_input() for a copyable stage type.
template <class Self>
class StageImpl : public Stage {
 public:
  using Stage::Stage;
  Ptr with_input(Ptr input) const override {
    auto copy = std::make_shared<Self>(static_cast<const Self&>(*this));
    copy->input_ = std::move(input);
    return copy;
  }
};

// Dataset's private parts, for the stages.
class Access {
 public:
  static const Stage::Ptr& stage(const Dataset& d) { return d.stage_; }
  static Dataset wrap(Stage::Ptr stage) { return Dataset(std::move(stage)); }
};

// splitmix64 of a combination: seeds for unrelated inputs look unrelated.
uint64_t mix_seed(uint64_t a, uint64_t b);

// ---- Sources (stages_source.cc) ----

struct EmptyStage final : StageImpl<EmptyStage> {
  EmptyStage() : StageImpl(nullptr) {}
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return 0; }
  std::string describe() const override { return "empty"; }
};

struct SlicesStage final : StageImpl<SlicesStage> {
  explicit SlicesStage(std::vector<at::Tensor> t);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return size; }
  std::string describe() const override;
  std::vector<at::Tensor> tensors;
  int64_t size;
};

struct RangeStage final : StageImpl<RangeStage> {
  explicit RangeStage(int64_t n) : StageImpl(nullptr), size(n) {}
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return size; }
  std::string describe() const override;
  int64_t size;
};

// File-based source: the elements of open(file) for each file in order.
struct FilesStage final : StageImpl<FilesStage> {
  using OpenFn = std::function<Dataset(const std::string&)>;
  FilesStage(std::string name, std::vector<std::string> files, OpenFn open);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return files.empty() ? 0 : kUnknownCardinality; }
  std::string describe() const override;
  std::string name;  // "from_files", "tfrecord"
  std::vector<std::string> files;
  OpenFn open;
};

// The records of one TFRecord file, parsed (tfrecord_source.cc).
Dataset tfrecord_file(const std::string& path, std::function<Example(const std::string&)> parse);

// ---- Element-wise transformations (stages_transform.cc) ----

struct ShuffleStage final : StageImpl<ShuffleStage> {
  ShuffleStage(Ptr in, int64_t buffer, uint64_t seed, bool reshuffle);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return input_cardinality(); }
  std::string describe() const override;
  int64_t buffer;
  uint64_t seed;
  bool reshuffle;
};

struct BatchStage final : StageImpl<BatchStage> {
  BatchStage(Ptr in, int64_t size, bool drop);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override;
  std::string describe() const override;
  int64_t size;
  bool drop;
  std::string distributed;  // set by distribute(kFile / kOff): "FILE, worker 0 of 2"
};

struct RepeatStage final : StageImpl<RepeatStage> {
  RepeatStage(Ptr in, int64_t count);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override;
  std::string describe() const override;
  int64_t count;
};

struct FilterStage final : StageImpl<FilterStage> {
  FilterStage(Ptr in, std::function<bool(const Example&)> pred);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override;
  std::string describe() const override { return "filter"; }
  std::function<bool(const Example&)> pred;
};

// Shard, take and skip: positions kept by a stride and a window.
struct ShardStage final : StageImpl<ShardStage> {
  ShardStage(Ptr in, int64_t num_shards, int64_t index);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override;
  std::string describe() const override;
  int64_t num_shards;
  int64_t index;
};

struct TakeStage final : StageImpl<TakeStage> {
  TakeStage(Ptr in, int64_t n);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override;
  std::string describe() const override;
  int64_t n;
};

struct SkipStage final : StageImpl<SkipStage> {
  SkipStage(Ptr in, int64_t n);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override;
  std::string describe() const override;
  int64_t n;
};

// distribute(kData): keeps chunk `index` of `workers` of every (global) batch.
struct SplitStage final : StageImpl<SplitStage> {
  SplitStage(Ptr in, int workers, int index, int64_t global_batch);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return input_cardinality(); }
  std::string describe() const override;
  int workers;
  int index;
  int64_t global_batch;
};

// Chunk k of `parts` contiguous chunks of every component along dim 0 (views); chunk sizes
// differ by at most 1, the first ones larger. InvalidArgument for a scalar component or
// components of different size(0). `what` names the caller in messages.
Example split_chunk(const Example& batch, int parts, int k, const char* what);

// ---- Threaded transformations (stages_threaded.cc) ----

struct MapStage final : StageImpl<MapStage> {
  MapStage(Ptr in, std::function<Example(Example)> fn, int parallel);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return input_cardinality(); }
  std::string describe() const override;
  std::function<Example(Example)> fn;
  int parallel;
};

struct PrefetchStage final : StageImpl<PrefetchStage> {
  PrefetchStage(Ptr in, int64_t buffer);
  std::unique_ptr<Iter> make(const Context& ctx) const override;
  int64_t cardinality() const override { return input_cardinality(); }
  std::string describe() const override;
  int64_t buffer;
};

}  // namespace data_detail
}  // namespace chorus
