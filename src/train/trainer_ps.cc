// Trainer::fit under ParameterServerStrategy. Workers serve the chief's steps, each on the
// next batch of their own part of the data; the chief's global step is one round of
// num_workers scheduled steps, whose loss and metric sums it adds up.
#include <ATen/ATen.h>

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

Trainer::StepSums Trainer::scheduled_round(ParameterServerStrategy& strategy) {
  std::vector<ps::RemoteValue> round;
  for (int w = 0; w < strategy.num_workers(); ++w) round.push_back(strategy.schedule(kTrainStep));
  StepSums sums;
  for (const auto& value : round) sums.add(ParameterServerStrategy::values(value));
  return sums;
}

}  // namespace chorus
