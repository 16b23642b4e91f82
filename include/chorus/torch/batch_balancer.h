// BatchBalancer: splits each step's global batch among the ranks in proportion to how fast
// each computed its last share, so that a synchronous step waits less for its slowest rank.
// No libtorch needed.
//
// With equal shares a synchronous step lasts as long as the slowest rank's forward and
// backward; on hosts whose cores change speed from one step to the next (a hypervisor's
// vCPUs) that costs several per cent against the same workers running alone (docs/torch.md,
// "Uneven shares"). The balancer gives a faster rank more of the global batch instead.
// The result is the same as training on the whole global batch in one process, provided
// each rank scales its mean loss by BatchShare::loss_scale before backward:
//
//   chorus::BatchBalancer balancer;
//   for each step:
//     chorus::BatchShare s = balancer.next(rows_in_this_global_batch);
//     t0 = now; loss = loss_fn(model(x[s.begin:s.end]), y[s.begin:s.end]) * s.loss_scale;
//     loss.backward(); balancer.record(now - t0);
//     optimizer.step();  // chorus::DistributedOptimizer: the average over ranks
//
// Rates travel by one small allgather per step, started by record() and awaited by the
// next next(), so the shares of step i come from the times of step i-1 on every rank,
// identically. The first step (and any step after a rank reported no usable time) splits
// evenly. Every rank gets at least `min_share` of an even share, and at least one row.
//
// Every rank must call next() and record() the same number of times, in the same order,
// with the same rows.
// Errors: InvalidArgument (rows < size(), negative or non-finite seconds, record() without
// next(), next() twice without record(); ranks that gave next() different rows, on every
// rank at the next next()); the allgather's errors (engine.h).
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/engine.h"

namespace chorus {

struct BatchShare {
  int64_t begin = 0;  // this rank's rows of the global batch: [begin, end)
  int64_t end = 0;
  // Multiply this rank's mean loss by it: size() x (end - begin) / rows, so that the
  // average of the ranks' gradients is the global batch's mean gradient.
  double loss_scale = 1.0;
  int64_t rows() const { return end - begin; }
};

struct BatchBalancerOptions {
  // The least share a rank gets, as a fraction of an even share (in (0, 1]): a bound on
  // how far one noisy step moves the split.
  double min_share = 0.5;
  std::string name = "chorus.balance";  // of the allgather; unique per balancer
  Engine* engine = nullptr;             // nullptr: the engine chorus::init() started
};

// Rows per rank for `rows` in proportion to `rates` (samples per second, one per rank):
// each at least max(1, floor(min_share x rows / ranks)), summing to `rows`, remainders to
// the largest fractions (ties to the lower rank). Equal shares (the first ranks one more)
// when any rate is not positive and finite. REQUIRES: rows >= rates.size() > 0.
std::vector<int64_t> balanced_rows(const std::vector<double>& rates, int64_t rows,
                                   double min_share);

class BatchBalancer {
 public:
  // InvalidArgument unless 0 < min_share <= 1.
  explicit BatchBalancer(BatchBalancerOptions options = {});
  ~BatchBalancer();
  BatchBalancer(const BatchBalancer&) = delete;
  BatchBalancer& operator=(const BatchBalancer&) = delete;

  // This rank's share of the coming step's `rows` (the global batch; the last one of an
  // epoch may be smaller). Waits for the previous record()'s allgather.
  BatchShare next(int64_t rows);
  // The seconds this rank took for its share's forward and backward (not the wait for
  // the others). Starts the allgather of this rank's rate and of the step's rows.
  void record(double seconds);

  // The rows each rank got in the last next(), by rank.
  const std::vector<int64_t>& last_rows() const { return rows_; }

 private:
  BatchBalancerOptions options_;
  Engine& engine_;
  std::vector<double> rates_;  // samples/s per rank from the last allgather; 0 before one
  std::vector<int64_t> rows_;  // of the last next()
  double sent_[2] = {0, 0};    // the allgather's input (rate, rows); lives until it finishes
  Handle pending_;
  bool awaiting_record_ = false;

  void take_rates(const Handle& done);
};

}  // namespace chorus
