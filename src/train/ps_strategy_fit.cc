// Trainer::fit under ParameterServerStrategy (Strategy::make_train_steps). Workers serve the
// chief's steps, each on the next batch of their own part of the data; the chief's global
// step is one round of num_workers scheduled steps, whose loss and metric sums it adds up.
#include <algorithm>
#include <deque>
#include <memory>

#include "chorus/error.h"
#include "chorus/train/callbacks.h"
#include "chorus/train/ps_strategy.h"

namespace chorus {
namespace {

constexpr const char* kTrainStep = "chorus.fit.train";

// The chief's steps. Rounds are scheduled `depth` ahead, so a worker that finishes its
// step takes one of the next round at once instead of waiting for the chief to collect
// this one.
class ScheduledRounds : public TrainSteps {
 public:
  ScheduledRounds(ParameterServerStrategy& strategy, const TrainContext& ctx)
      : strategy_(strategy),
        ctx_(ctx),
        depth_(static_cast<size_t>(std::max(1, strategy.options().rounds_in_flight))) {}

  void begin_epoch(const TrainContext&) override {}

  std::optional<std::vector<double>> next() override {
    if (unscheduled_ < 0) {  // at the first step: BackupAndRestore moves the start
      unscheduled_ = (ctx_.epochs - ctx_.initial_epoch) * ctx_.steps_per_epoch - ctx_.initial_step;
    }
    while (rounds_.size() < depth_ && unscheduled_ > 0) {
      std::vector<ps::RemoteValue> round;
      for (int w = 0; w < strategy_.num_workers(); ++w)
        round.push_back(strategy_.schedule(kTrainStep));
      rounds_.push_back(std::move(round));
      --unscheduled_;
    }
    if (rounds_.empty()) return std::nullopt;
    std::vector<double> sums;
    for (const auto& value : rounds_.front()) {
      std::vector<double> one = ParameterServerStrategy::values(value);
      if (sums.empty()) sums.assign(one.size(), 0.0);
      CHORUS_CHECK_ARG(one.size() == sums.size(), "fit: a scheduled step returned ", one.size(),
                       " sums, expected ", sums.size());
      for (size_t i = 0; i < one.size(); ++i) sums[i] += one[i];
    }
    rounds_.pop_front();
    return sums;
  }

  void end() override { strategy_.join(); }  // rounds scheduled ahead of an early stop

 private:
  ParameterServerStrategy& strategy_;
  const TrainContext& ctx_;
  const size_t depth_;
  std::deque<std::vector<ps::RemoteValue>> rounds_;
  int64_t unscheduled_ = -1;
};

}  // namespace

std::unique_ptr<TrainSteps> ParameterServerStrategy::make_train_steps(const TrainLoop& loop,
                                                                      TrainContext& ctx) {
  if (!is_chief()) {
    // Repeated: how many steps this worker runs is the coordinator's choice, not the data's.
    DatasetIterator it = distribute_dataset(loop.data, loop.shard_policy).repeat().iterate(0);
    ctx.model->train(true);
    define_step(kTrainStep, [&loop, &it](PsStepContext&) {
      std::optional<Example> batch = it.next();
      CHORUS_CHECK_ARG(batch.has_value(), "fit: the training data yielded no batch on this worker");
      // The loss is averaged over this worker's part: the ps averages rounds (kSync) or
      // applies each part's gradient as one update.
      return loop.step(*batch, (*batch)[0].size(0));
    });
    serve();
    return nullptr;
  }
  // The chief schedules steps and reads no data itself.
  ctx.steps_per_epoch =
      loop.steps_per_epoch > 0 ? loop.steps_per_epoch : distribute_dataset(loop.data).cardinality();
  CHORUS_CHECK_ARG(ctx.steps_per_epoch > 0,
                   "fit: ParameterServerStrategy needs steps_per_epoch (or a dataset of known "
                   "cardinality): the chief does not read the data");
  return std::make_unique<ScheduledRounds>(*this, ctx);
}

bool ParameterServerStrategy::runs_evaluation() const { return is_chief(); }

}  // namespace chorus
