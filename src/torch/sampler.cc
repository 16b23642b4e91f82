// DistributedSampler (include/chorus/torch/sampler.h). No libtorch in this file.
#include "chorus/torch/sampler.h"

#include <numeric>
#include <random>

#include "chorus/error.h"

namespace chorus {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  CHORUS_CHECK_ARG(num_replicas > 0, "DistributedSampler: num_replicas must be positive, got ",
                   num_replicas);
  CHORUS_CHECK_ARG(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
                   " outside [0, ", num_replicas, ")");
  CHORUS_CHECK_ARG(dataset_size >= 0, "DistributedSampler: negative dataset size ", dataset_size);
}

int64_t DistributedSampler::num_samples() const {
  if (options_.drop_last) return dataset_size_ / num_replicas_;
  return (dataset_size_ + num_replicas_ - 1) / num_replicas_;
}

int64_t DistributedSampler::num_batches(int64_t batch_size, bool drop_last_batch) const {
  CHORUS_CHECK_ARG(batch_size > 0, "DistributedSampler: batch size must be positive, got ",
                   batch_size);
  int64_t n = num_samples();
  return drop_last_batch ? n / batch_size : (n + batch_size - 1) / batch_size;
}

namespace {

// Fisher-Yates with mt19937_64 and our own bounded draw: std::shuffle and
// std::uniform_int_distribution differ between standard libraries, and every rank must
// compute the same permutation.
void portable_shuffle(std::vector<int64_t>& v, uint64_t seed) {
  std::mt19937_64 gen(seed);
  for (size_t i = v.size(); i > 1; --i) {
    // Rejection sampling for an unbiased draw in [0, i).
    const uint64_t bound = static_cast<uint64_t>(i);
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
      x = gen();
    } while (x >= limit);
    std::swap(v[i - 1], v[x % bound]);
  }
}

}  // namespace

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all(static_cast<size_t>(dataset_size_));
  std::iota(all.begin(), all.end(), int64_t{0});
  if (options_.shuffle) {
    // Mix epoch into the seed (splitmix-style constant) so that nearby seeds and epochs
    // give unrelated permutations.
    portable_shuffle(all, options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch_));
  }
  const int64_t total = total_size();
  // Pad by repeating the permutation's beginning (drop_last: total <= size, nothing to do).
  for (int64_t i = 0; static_cast<int64_t>(all.size()) < total; ++i) {
    const int64_t repeat = all[i];
    all.push_back(repeat);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples()));
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(all[i]);
  return mine;
}

}  // namespace chorus
