// DistributedSampler: which samples of a dataset this rank trains on in an epoch
// (torch.utils.data.DistributedSampler). No libtorch needed.
//
// Every epoch, every rank computes the same permutation of [0, dataset_size) from
// (seed, epoch) — a portable mt19937_64 Fisher-Yates, so ranks built with different
// standard libraries agree — and takes every num_replicas-th index starting at its rank.
// So that every rank runs the same number of steps (no rank waits on a collective the
// others never start):
//   drop_last = false: the permutation is padded with its own first indices up to a
//     multiple of num_replicas: a few samples are seen twice per epoch;
//   drop_last = true: the tail that does not divide evenly is dropped for this epoch.
// Every sample appears exactly once per epoch across ranks when num_replicas divides
// dataset_size (tested), else as described above.
//
// Thread safety: const methods from any thread; set_epoch() not concurrently with them.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;  // must be the same on every rank
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // REQUIRES: 0 <= rank < num_replicas, dataset_size >= 0 (InvalidArgument otherwise).
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                     DistributedSamplerOptions options = {});

  // Reshuffles: call at the start of every epoch with the same value on every rank.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, in order; size() == num_samples().
  std::vector<int64_t> indices() const;
  // Samples per rank per epoch (the same on every rank).
  int64_t num_samples() const;
  // Samples per epoch over all ranks (num_samples() * num_replicas).
  int64_t total_size() const { return num_samples() * num_replicas_; }
  // Batches per epoch of `batch_size` from indices(); the last one may be partial unless
  // drop_last_batch.
  int64_t num_batches(int64_t batch_size, bool drop_last_batch) const;

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
};

}  // namespace chorus
