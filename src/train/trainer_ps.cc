// Trainer::fit under ParameterServerStrategy. Workers serve the chief's steps, each on the
// next batch of their own part of the data; the chief's global step is one round of
// num_workers scheduled steps, whose loss and metric sums it adds up.
#include <ATen/ATen.h>

#include <algorithm>
#include <deque>
#include <memory>

#include "chorus/error.h"
#include "chorus/train/ps_strategy.h"
#include "chorus/train/trainer.h"

namespace chorus {

namespace {
constexpr const char* kTrainStep = "chorus.fit.train";
}

History Trainer::serve_scheduled_steps(ParameterServerStrategy& strategy, const Dataset& train,
                                       const FitOptions& options) {
  // Repeated: how many steps this worker runs is the coordinator's choice, not the data's.
  DatasetIterator it = strategy.distribute_dataset(train, options.shard_policy).repeat().iterate(0);
  model_.train(true);
  strategy.define_step(kTrainStep, [this, &it](PsStepContext&) {
    std::optional<Example> batch = it.next();
    CHORUS_CHECK_ARG(batch.has_value(), "fit: the training data yielded no batch on this worker");
    // The loss is averaged over this worker's part: the ps averages rounds (kSync) or
    // applies each part's gradient as one update.
    return step(*batch, (*batch)[0].size(0), /*train=*/true).values;
  });
  strategy.serve();
  return History{};
}

// Rounds are scheduled `rounds_in_flight` ahead, so a worker that finishes its step takes
// one of the next round at once instead of waiting for the chief to collect this one.
Trainer::StepSource Trainer::scheduled_rounds(ParameterServerStrategy& strategy, const TrainContext& ctx) {
  struct Pipeline {
    std::deque<std::vector<ps::RemoteValue>> rounds;
    int64_t unscheduled = -1;  // set at the first call: BackupAndRestore moves the start
  };
  auto pipeline = std::make_shared<Pipeline>();
  const size_t depth = static_cast<size_t>(std::max(1, strategy.options().rounds_in_flight));
  return [&strategy, &ctx, pipeline, depth]() -> std::optional<StepSums> {
    Pipeline& p = *pipeline;
    if (p.unscheduled < 0) {
      p.unscheduled = (ctx.epochs - ctx.initial_epoch) * ctx.steps_per_epoch - ctx.initial_step;
    }
    while (p.rounds.size() < depth && p.unscheduled > 0) {
      std::vector<ps::RemoteValue> round;
      for (int w = 0; w < strategy.num_workers(); ++w) round.push_back(strategy.schedule(kTrainStep));
      p.rounds.push_back(std::move(round));
      --p.unscheduled;
    }
    if (p.rounds.empty()) return std::nullopt;
    StepSums sums;
    for (const auto& value : p.rounds.front()) sums.add(ParameterServerStrategy::values(value));
    p.rounds.pop_front();
    return sums;
  };
}

}  // namespace chorus
