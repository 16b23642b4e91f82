// Dataset and DatasetIterator (include/chorus/train/dataset.h): building the stage graph,
// iterating it, and distribute()'s rewrites of it (src/train/data/stages.h).
#include "chorus/train/dataset.h"

#include "chorus/error.h"
#include "stages.h"

namespace chorus {

using data_detail::Stage;

// ---- DatasetIterator ----

DatasetIterator::DatasetIterator() = default;
DatasetIterator::DatasetIterator(std::unique_ptr<data_detail::Iter> iter)
    : iter_(std::move(iter)) {}
DatasetIterator::~DatasetIterator() = default;
DatasetIterator::DatasetIterator(DatasetIterator&&) noexcept = default;
DatasetIterator& DatasetIterator::operator=(DatasetIterator&&) noexcept = default;

std::optional<Example> DatasetIterator::next() {
  if (!iter_) return std::nullopt;
  try {
    std::optional<Example> e = iter_->next();
    if (!e) iter_.reset();  // stops the threads as soon as the pass is over
    return e;
  } catch (...) {
    iter_.reset();
    throw;
  }
}

// ---- Sources ----

Dataset::Dataset() : stage_(std::make_shared<data_detail::EmptyStage>()) {}
Dataset::Dataset(std::shared_ptr<const Stage> stage) : stage_(std::move(stage)) {}

Dataset Dataset::from_tensor_slices(std::vector<at::Tensor> tensors) {
  return Dataset(std::make_shared<data_detail::SlicesStage>(std::move(tensors)));
}

Dataset Dataset::range(int64_t n) {
  CHORUS_CHECK_ARG(n >= 0, "range: n must be >= 0, got ", n);
  return Dataset(std::make_shared<data_detail::RangeStage>(n));
}

Dataset Dataset::from_files(std::vector<std::string> files,
                            std::function<Dataset(const std::string&)> open) {
  return Dataset(
      std::make_shared<data_detail::FilesStage>("from_files", std::move(files), std::move(open)));
}

Dataset Dataset::tfrecord(std::vector<std::string> files,
                          std::function<Example(const std::string& record)> parse) {
  CHORUS_CHECK_ARG(parse, "tfrecord: no function to parse a record");
  auto open = [parse = std::move(parse)](const std::string& path) {
    return data_detail::tfrecord_file(path, parse);
  };
  return Dataset(
      std::make_shared<data_detail::FilesStage>("tfrecord", std::move(files), std::move(open)));
}

// ---- Transformations ----

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle) const {
  return Dataset(std::make_shared<data_detail::ShuffleStage>(stage_, buffer_size, seed, reshuffle));
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  return Dataset(std::make_shared<data_detail::BatchStage>(stage_, batch_size, drop_remainder));
}

Dataset Dataset::repeat(int64_t count) const {
  return Dataset(std::make_shared<data_detail::RepeatStage>(stage_, count));
}

Dataset Dataset::map(std::function<Example(Example)> fn, int num_parallel_calls) const {
  return Dataset(
      std::make_shared<data_detail::MapStage>(stage_, std::move(fn), num_parallel_calls));
}

Dataset Dataset::filter(std::function<bool(const Example&)> pred) const {
  return Dataset(std::make_shared<data_detail::FilterStage>(stage_, std::move(pred)));
}

Dataset Dataset::prefetch(int64_t buffer_size) const {
  return Dataset(std::make_shared<data_detail::PrefetchStage>(stage_, buffer_size));
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  return Dataset(std::make_shared<data_detail::ShardStage>(stage_, num_shards, index));
}

Dataset Dataset::take(int64_t n) const {
  return Dataset(std::make_shared<data_detail::TakeStage>(stage_, n));
}

Dataset Dataset::skip(int64_t n) const {
  return Dataset(std::make_shared<data_detail::SkipStage>(stage_, n));
}

// ---- Iteration ----

DatasetIterator Dataset::iterate(int64_t epoch) const {
  data_detail::Context ctx;
  ctx.epoch = epoch;
  return DatasetIterator(stage_->make(ctx));
}

int64_t Dataset::cardinality() const { return stage_->cardinality(); }

namespace {

// The stages of a graph, source first.
std::vector<Stage::Ptr> chain_of(const Stage::Ptr& last) {
  std::vector<Stage::Ptr> chain;
  for (Stage::Ptr s = last; s; s = s->input()) chain.push_back(s);
  return {chain.rbegin(), chain.rend()};
}

// Relinks every stage onto its (possibly replaced) predecessor.
Stage::Ptr relink(const std::vector<Stage::Ptr>& chain) {
  Stage::Ptr last = chain[0];
  for (size_t k = 1; k < chain.size(); ++k) last = chain[k]->with_input(last);
  return last;
}

// Index of the last batch() stage, -1 when none.
int last_batch(const std::vector<Stage::Ptr>& chain) {
  for (int k = static_cast<int>(chain.size()) - 1; k >= 0; --k) {
    if (dynamic_cast<const data_detail::BatchStage*>(chain[k].get())) return k;
  }
  return -1;
}

bool is_distributed(const std::vector<Stage::Ptr>& chain) {
  for (const Stage::Ptr& s : chain) {
    if (dynamic_cast<const data_detail::SplitStage*>(s.get())) return true;
    auto* b = dynamic_cast<const data_detail::BatchStage*>(s.get());
    if (b && !b->distributed.empty()) return true;
  }
  return false;
}

}  // namespace

std::string Dataset::describe() const {
  std::string out;
  for (const Stage::Ptr& s : chain_of(stage_)) {
    if (!out.empty()) out += " -> ";
    out += s->describe();
  }
  return out;
}

int64_t Dataset::batch_size() const {
  for (Stage::Ptr s = stage_; s; s = s->input()) {
    if (auto* split = dynamic_cast<const data_detail::SplitStage*>(s.get())) {
      return split->global_batch / split->workers;
    }
    if (auto* b = dynamic_cast<const data_detail::BatchStage*>(s.get())) return b->size;
  }
  return -1;
}

// ---- distribute ----

namespace {

struct Distribution {
  int workers;
  int index;
  AutoShardPolicy policy;
  std::string note() const {
    return std::string(to_string(policy)) + ", worker " + std::to_string(index) + " of " +
           std::to_string(workers);
  }
};

// kFile / kOff: the last batch makes batches of B / W.
void shrink_batch(std::vector<Stage::Ptr>& chain, int b, const Distribution& d) {
  auto batch = std::make_shared<data_detail::BatchStage>(
      static_cast<const data_detail::BatchStage&>(*chain[b]));
  batch->size /= d.workers;
  batch->distributed = d.note();
  chain[b] = batch;
}

// kFile: the source reads files index, index + W, ...
void shard_files(std::vector<Stage::Ptr>& chain, const Distribution& d) {
  auto files = std::make_shared<data_detail::FilesStage>(
      static_cast<const data_detail::FilesStage&>(*chain[0]));
  std::vector<std::string> mine;
  for (size_t f = d.index; f < files->files.size(); f += d.workers) mine.push_back(files->files[f]);
  files->files = std::move(mine);
  chain[0] = files;
}

AutoShardPolicy resolve(AutoShardPolicy policy, const Stage& source, int workers) {
  auto* files = dynamic_cast<const data_detail::FilesStage*>(&source);
  if (policy == AutoShardPolicy::kAuto) {
    const bool enough = files && files->files.size() >= static_cast<size_t>(workers);
    return enough ? AutoShardPolicy::kFile : AutoShardPolicy::kData;
  }
  if (policy == AutoShardPolicy::kFile) {
    CHORUS_CHECK_ARG(files, "distribute(FILE): the source ", source.describe(),
                     " is not file-based (from_files / tfrecord); use kData or kAuto");
    CHORUS_CHECK_ARG(files->files.size() >= static_cast<size_t>(workers),
                     "distribute(FILE): ", files->files.size(), " file(s) for ", workers,
                     " workers; FILE sharding needs at least one file per worker (use kData "
                     "or kAuto, or write more files)");
  }
  return policy;
}

}  // namespace

Dataset Dataset::distribute(int num_workers, int worker_index, AutoShardPolicy policy) const {
  CHORUS_CHECK_ARG(num_workers >= 1, "distribute: num_workers must be positive, got ", num_workers);
  CHORUS_CHECK_ARG(worker_index >= 0 && worker_index < num_workers, "distribute: worker_index ",
                   worker_index, " outside [0, ", num_workers, ")");
  std::vector<Stage::Ptr> chain = chain_of(stage_);
  CHORUS_CHECK_ARG(!is_distributed(chain), "distribute: ", describe(), " is already distributed");
  const int b = last_batch(chain);
  CHORUS_CHECK_ARG(b >= 0, "distribute: ", describe(),
                   " has no batch() stage; batch it with the global batch size first");
  const int64_t global = static_cast<const data_detail::BatchStage&>(*chain[b]).size;
  CHORUS_CHECK_ARG(global % num_workers == 0, "distribute: the global batch size ", global,
                   " is not divisible by ", num_workers, " workers");

  const Distribution d{num_workers, worker_index, resolve(policy, *chain[0], num_workers)};
  if (d.policy == AutoShardPolicy::kData) {
    return Dataset(
        std::make_shared<data_detail::SplitStage>(stage_, num_workers, worker_index, global));
  }
  if (d.policy == AutoShardPolicy::kFile) shard_files(chain, d);
  shrink_batch(chain, b, d);
  return Dataset(relink(chain));
}

// ---- Helpers ----

std::vector<Example> split_batch(const Example& batch, int parts) {
  CHORUS_CHECK_ARG(parts >= 1, "split_batch: parts must be positive, got ", parts);
  std::vector<Example> out;
  out.reserve(static_cast<size_t>(parts));
  for (int k = 0; k < parts; ++k)
    out.push_back(data_detail::split_chunk(batch, parts, k, "split_batch"));
  return out;
}

const char* to_string(AutoShardPolicy policy) {
  switch (policy) {
    case AutoShardPolicy::kAuto:
      return "AUTO";
    case AutoShardPolicy::kFile:
      return "FILE";
    case AutoShardPolicy::kData:
      return "DATA";
    case AutoShardPolicy::kOff:
      return "OFF";
  }
  return "?";
}

}  // namespace chorus
