// BatchBalancer (include/chorus/torch/batch_balancer.h). No libtorch in this file.
#include "chorus/torch/batch_balancer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <utility>

#include "chorus/error.h"
#include "chorus/torch/runtime.h"

namespace chorus {
namespace {

std::vector<int64_t> even_rows(size_t ranks, int64_t rows) {
  const auto n = static_cast<int64_t>(ranks);
  std::vector<int64_t> out(ranks, rows / n);
  for (int64_t r = 0; r < rows % n; ++r) ++out[r];
  return out;
}

bool usable(const std::vector<double>& rates) {
  return std::all_of(rates.begin(), rates.end(),
                     [](double r) { return std::isfinite(r) && r > 0; });
}

}  // namespace

std::vector<int64_t> balanced_rows(const std::vector<double>& rates, int64_t rows,
                                   double min_share) {
  const auto ranks = static_cast<int64_t>(rates.size());
  CHORUS_CHECK_ARG(ranks > 0 && rows >= ranks, "BatchBalancer: ", rows,
                   " rows cannot give each of ", ranks, " ranks one");
  if (!usable(rates)) return even_rows(rates.size(), rows);
  const double least = std::max(1.0, std::floor(min_share * static_cast<double>(rows / ranks)));
  // Proportional targets; a rank below `least` is pinned there and the rest share what is
  // left in proportion again (at most `ranks` rounds).
  std::vector<double> target(rates.size());
  std::vector<bool> pinned(rates.size(), false);
  for (bool again = true; again;) {
    again = false;
    double free_rows = static_cast<double>(rows), free_rate = 0;
    for (size_t r = 0; r < rates.size(); ++r) {
      if (pinned[r]) {
        free_rows -= least;
      } else {
        free_rate += rates[r];
      }
    }
    for (size_t r = 0; r < rates.size(); ++r) {
      if (pinned[r]) continue;
      target[r] = free_rows * rates[r] / free_rate;
      if (target[r] < least) {
        target[r] = least;
        pinned[r] = again = true;
      }
    }
  }
  // Whole rows, the remainder to the largest fractions (ties to the lower rank).
  std::vector<int64_t> out(rates.size());
  std::vector<std::pair<double, size_t>> fractions;  // (-fraction, rank): largest first
  int64_t left = rows;
  for (size_t r = 0; r < rates.size(); ++r) {
    out[r] = static_cast<int64_t>(target[r]);
    left -= out[r];
    fractions.emplace_back(-(target[r] - static_cast<double>(out[r])), r);
  }
  std::sort(fractions.begin(), fractions.end());
  for (size_t i = 0; left > 0; i = (i + 1) % fractions.size(), --left) ++out[fractions[i].second];
  return out;
}

BatchBalancer::BatchBalancer(BatchBalancerOptions options)
    : options_(std::move(options)),
      engine_(detail::engine_or_default(options_.engine)),
      rates_(static_cast<size_t>(engine_.size()), 0.0) {  // no rates yet: even shares
  CHORUS_CHECK_ARG(options_.min_share > 0 && options_.min_share <= 1,
                   "BatchBalancer: min_share must be in (0, 1], got ", options_.min_share);
}

BatchBalancer::~BatchBalancer() {
  // The allgather reads sent_: it must finish before this object goes.
  if (pending_.valid()) pending_.wait_for(std::chrono::seconds(60));
}

BatchShare BatchBalancer::next(int64_t rows) {
  CHORUS_CHECK_ARG(!awaiting_record_, "BatchBalancer: next() twice without record()");
  if (pending_.valid()) {
    Handle done = pending_;
    pending_ = Handle();
    done.wait();
    take_rates(done);
  }
  rows_ = balanced_rows(rates_, rows, options_.min_share);
  const int me = engine_.rank();
  BatchShare share;
  share.begin = std::accumulate(rows_.begin(), rows_.begin() + me, int64_t{0});
  share.end = share.begin + rows_[me];
  share.loss_scale = static_cast<double>(engine_.size()) * static_cast<double>(share.rows()) /
                     static_cast<double>(rows);
  awaiting_record_ = true;
  return share;
}

void BatchBalancer::record(double seconds) {
  CHORUS_CHECK_ARG(awaiting_record_, "BatchBalancer: record() without next()");
  CHORUS_CHECK_ARG(std::isfinite(seconds) && seconds >= 0,
                   "BatchBalancer: seconds must be finite and not negative, got ", seconds);
  awaiting_record_ = false;
  // 0 seconds (a clock too coarse) is no usable rate: the next step splits evenly.
  sent_[0] = seconds > 0 ? static_cast<double>(rows_[engine_.rank()]) / seconds : 0.0;
  sent_[1] = static_cast<double>(std::accumulate(rows_.begin(), rows_.end(), int64_t{0}));
  pending_ = engine_.allgather(options_.name, sent_, DataType::kFloat64, {1, 2});
}

void BatchBalancer::take_rates(const Handle& done) {
  const auto ranks = static_cast<size_t>(engine_.size());
  CHORUS_CHECK_ARG(done.bytes() == ranks * sizeof sent_, "BatchBalancer: the allgather of ",
                   "rates returned ", done.bytes(), " bytes");
  const auto* got = static_cast<const double*>(done.data());
  for (size_t r = 0; r < ranks; ++r) {
    // Ranks that split different batches took overlapping rows: say so on every rank.
    CHORUS_CHECK_ARG(got[2 * r + 1] == sent_[1], "BatchBalancer: the ranks split different ",
                     "global batches in the last step: rank ", engine_.rank(), " had ", sent_[1],
                     " rows, rank ", r, " had ", got[2 * r + 1]);
    rates_[r] = got[2 * r];
  }
}

}  // namespace chorus
