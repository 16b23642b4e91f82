// Dataset: a tf.data-style input pipeline on torch tensors (docs/data.md).
//
//   auto ds = Dataset::from_tensor_slices({images, labels})
//                 .shuffle(1024, /*seed=*/7)
//                 .batch(128)            // the GLOBAL batch size
//                 .prefetch(2)
//                 .distribute(num_workers, worker_index);   // each worker: batches of 128 / W
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     auto it = ds.iterate(epoch);
//     while (auto batch = it.next()) train_step((*batch)[0], (*batch)[1]);
//   }
//
// A Dataset is an immutable, linear graph of stages shared between copies: copying is
// cheap and every transformation returns a new Dataset. Iterating runs the graph; an
// iterator owns everything it needs, so it may outlive the Dataset it came from.
//
// Determinism: shuffles use a portable mt19937_64 with a seed derived from (seed, epoch,
// repetition), so the same (seed, epoch) gives the same order on every rank, platform and
// run. map() preserves order whatever its parallelism.
//
// Errors: InvalidArgument for a broken requirement (checked when the stage is built where
// possible, else when the element arrives); IoError from file readers; exceptions thrown
// by user functions (map, filter, open, parse) reach next() unchanged.
//
// Thread safety: Dataset: any thread (immutable). DatasetIterator: one thread at a time.
// User functions run on the iterating thread, or on a prefetch() thread above them;
// map(num_parallel_calls > 1) runs its function on several threads at once, and iterators
// of one Dataset used in different threads call the same functions concurrently.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace chorus {

// One element of a dataset: its components, e.g. {image, label}.
using Example = std::vector<at::Tensor>;

// How distribute() splits the work between workers (tf.data.experimental.AutoShardPolicy).
enum class AutoShardPolicy { kAuto, kFile, kData, kOff };

constexpr int64_t kInfiniteCardinality = -1;
constexpr int64_t kUnknownCardinality = -2;
// prefetch(kAutotune): 2 batches; map(fn, kAutotune): one call per hardware thread.
constexpr int kAutotune = -1;

namespace data_detail {
class Stage;
class Iter;
class Access;
}  // namespace data_detail

// One pass over a dataset. Move-only. Destroying it stops its background threads
// (prefetch, parallel map) promptly, even while they are blocked on a full queue; a user
// function still running is waited for.
class DatasetIterator {
 public:
  DatasetIterator();  // an exhausted iterator
  explicit DatasetIterator(std::unique_ptr<data_detail::Iter> iter);
  ~DatasetIterator();
  DatasetIterator(DatasetIterator&&) noexcept;
  DatasetIterator& operator=(DatasetIterator&&) noexcept;
  DatasetIterator(const DatasetIterator&) = delete;
  DatasetIterator& operator=(const DatasetIterator&) = delete;

  // The next element; nullopt at the end. Rethrows the first error of any stage (map or
  // filter functions, file readers, background threads); after an error the iterator is
  // finished and returns nullopt.
  std::optional<Example> next();

 private:
  std::unique_ptr<data_detail::Iter> iter_;
};

class Dataset {
 public:
  Dataset();  // the empty dataset

  // ---- Sources ----
  // Element i = {t[i] for t in tensors}. REQUIRES: at least one tensor, each defined with at
  // least one dimension, all with the same size(0).
  static Dataset from_tensor_slices(std::vector<at::Tensor> tensors);
  // Elements {int64 scalar tensor i} for i in [0, n). REQUIRES: n >= 0.
  static Dataset range(int64_t n);
  // The elements of open(files[0]), then of open(files[1]), ... (TFRecordDataset-like):
  // `open` runs when the iteration reaches the file, and its dataset is iterated with the
  // same epoch. File-based: AutoShardPolicy::kFile shards `files`. Cardinality unknown.
  static Dataset from_files(std::vector<std::string> files,
                            std::function<Dataset(const std::string&)> open);
  // The records of TFRecord files (chorus/train/tfrecord.h), each turned into an element
  // by `parse`. File-based. A corrupt file raises InvalidArgument, an unreadable one
  // IoError, when the iteration reaches it.
  static Dataset tfrecord(std::vector<std::string> files,
                          std::function<Example(const std::string& record)> parse);

  // ---- Transformations ----
  // tf.data's buffered shuffle: fills a buffer of buffer_size elements and returns a
  // uniformly chosen one, replacing it with the next input element. buffer_size >= the
  // dataset size gives a uniform permutation. The order depends on (seed, epoch,
  // repetition of an enclosing repeat()); with reshuffle_each_iteration = false on seed
  // alone (the same order every epoch and repetition). REQUIRES: buffer_size > 0.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  // Stacks batch_size consecutive elements component-wise along a new dim 0. The last
  // batch may be smaller unless drop_remainder. Elements whose components differ in
  // count, shape, dtype or device raise InvalidArgument naming the element and the shapes.
  // REQUIRES: batch_size > 0.
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // The input `count` times (-1: forever); each repetition reshuffles the shuffles below
  // it. Repeating an empty input forever yields nothing (no endless loop).
  // REQUIRES: count >= -1.
  Dataset repeat(int64_t count = -1) const;
  // fn applied to every element, in order. num_parallel_calls > 1 (or kAutotune) runs up to
  // that many calls at once on worker threads; fn must then be thread-safe.
  Dataset map(std::function<Example(Example)> fn, int num_parallel_calls = 1) const;
  // Only the elements for which pred is true. Cardinality becomes unknown.
  Dataset filter(std::function<bool(const Example&)> pred) const;
  // Runs the pipeline above on a background thread, up to buffer_size elements ahead.
  // REQUIRES: buffer_size > 0 or kAutotune.
  Dataset prefetch(int64_t buffer_size) const;
  // Elements index, index + num_shards, index + 2 * num_shards, ...
  // REQUIRES: num_shards > 0, 0 <= index < num_shards.
  Dataset shard(int64_t num_shards, int64_t index) const;
  // The first n elements (n = -1: all). REQUIRES: n >= -1.
  Dataset take(int64_t n) const;
  // All but the first n elements (n = -1: none left). REQUIRES: n >= -1.
  Dataset skip(int64_t n) const;

  // ---- Iteration ----
  // A pass over the dataset; `epoch` selects the reshuffle (see shuffle()). Starts the
  // prefetch threads.
  DatasetIterator iterate(int64_t epoch = 0) const;
  // Number of elements when known, else kInfiniteCardinality or kUnknownCardinality.
  // Exact for pipelines over from_tensor_slices / range without filter().
  int64_t cardinality() const;
  // The stages, source first: "from_tensor_slices(60000) -> shuffle(1024, seed 7) ->
  // batch(128)".
  std::string describe() const;

  // ---- Distribution (tf.distribute's experimental_distribute_dataset) ----
  // For a dataset batched with the GLOBAL batch size B (its last batch() stage), the
  // dataset worker `worker_index` of `num_workers` (W) iterates; each worker gets batches
  // of B / W rows:
  //   kData: every worker runs the whole pipeline and keeps its part of each global batch:
  //          global batch s is split into W contiguous chunks (split_batch) and worker i
  //          gets chunk i. The union of the workers' batches at step s is exactly the
  //          single-worker batch s, and every worker runs the same number of steps (a
  //          partial last batch is split as evenly as possible; chunks may be empty).
  //   kFile: a file-based source reads only files i, i + W, ... and batch() makes batches
  //          of B / W. Workers may run different numbers of steps when files differ in
  //          size. Fewer files than workers: InvalidArgument.
  //   kAuto: kFile when the source is file-based with at least W files, else kData.
  //   kOff:  every worker iterates the full dataset in batches of B / W (duplicates).
  // REQUIRES (InvalidArgument otherwise): a batch() stage, B % W == 0, W >= 1,
  // 0 <= worker_index < W, not already distributed.
  Dataset distribute(int num_workers, int worker_index,
                     AutoShardPolicy policy = AutoShardPolicy::kAuto) const;
  // Rows per batch of the last batch() stage (B / W after distribute()), -1 when none.
  int64_t batch_size() const;

 private:
  friend class data_detail::Access;
  explicit Dataset(std::shared_ptr<const data_detail::Stage> stage);
  std::shared_ptr<const data_detail::Stage> stage_;
};

// Splits every component of `batch` into `parts` contiguous chunks along dim 0 (views, no
// copy): chunk sizes differ by at most 1, the first ones larger, and may be 0. Used for
// per-replica batches inside one worker. REQUIRES: parts >= 1, every component with at
// least one dimension and the same size(0) (InvalidArgument otherwise).
std::vector<Example> split_batch(const Example& batch, int parts);

// Human-readable name: "AUTO", "FILE", "DATA", "OFF".
const char* to_string(AutoShardPolicy policy);

}  // namespace chorus
