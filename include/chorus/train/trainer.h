// Trainer: Keras' compile / fit / evaluate / predict for a libtorch model under any
// Strategy. The same program runs on one replica or many: choose the strategy and batch
// the dataset with the global batch size. What differs between strategies (where fit's
// steps come from, who evaluates) is the strategy's (Strategy::make_train_steps,
// Strategy::runs_evaluation); the trainer knows none of them by name.
//
//   chorus::Strategy& strategy = ...;   // any strategy of strategy.h
//   auto model = strategy.make_model<Net>([] { return Net(); });
//   torch::optim::SGD sgd(model.parameters(), 0.01 * strategy.num_replicas_in_sync());
//   chorus::Trainer trainer(strategy, model, sgd,
//                           chorus::losses::sparse_categorical_crossentropy(),
//                           {chorus::metrics::sparse_categorical_accuracy()});
//   auto history = trainer.fit(train.shuffle(10000, 7).batch(64 * workers), {.epochs = 3});
//
// Datasets yield {input, target} batches of the GLOBAL batch size; the trainer shards them
// across workers (FitOptions::shard_policy) and splits each worker's batch across its
// local replicas. Logs: "loss" and each metric's name, "val_" + those after validation.
//
// Thread safety: one thread calls the trainer; it drives the strategy's replica threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/train/callbacks.h"
#include "chorus/train/dataset.h"
#include "chorus/train/metrics.h"
#include "chorus/train/strategy.h"

namespace chorus {

struct FitOptions {
  int epochs = 1;
  // Steps per epoch; -1: until the dataset ends (a fresh pass every epoch). With a
  // value, one pass continues across epochs (a repeat()ed dataset), as in Keras.
  int64_t steps_per_epoch = -1;
  std::optional<Dataset> validation_data;
  int64_t validation_steps = -1;
  std::vector<std::shared_ptr<Callback>> callbacks;
  // 0 silent, 1 progress bar (chief only), 2 one line per epoch (chief only).
  int verbose = 1;
  AutoShardPolicy shard_policy = AutoShardPolicy::kAuto;
  // Ride out workers that leave or join (docs/elastic.md): every step is committed in
  // memory; when a worker is lost the others roll back to their last step, re-form and go
  // on; newcomers join at the next step. MultiWorkerMirroredStrategy in an elastic job
  // only (InvalidArgument otherwise); the global batch must divide by every worker count
  // the job may have (kData sharding then resumes exactly where the step sequence was).
  bool elastic = false;
};

struct History {
  std::vector<Logs> epochs;  // logs of every epoch run by this fit(), in order
  std::vector<double> get(const std::string& name) const;  // one value per epoch
};

class Trainer {
 public:
  // `optimizer` must be built on model.parameters(); all four outlive the trainer.
  Trainer(Strategy& strategy, ReplicatedModel& model, ::torch::optim::Optimizer& optimizer,
          LossFn loss, std::vector<std::shared_ptr<Metric>> metrics = {});
  ~Trainer();

  // Errors: InvalidArgument (bad options, a dataset that does not yield {input, target},
  // batch not divisible by the workers), and what the strategy's collectives throw.
  History fit(const Dataset& train, FitOptions options);
  // Empty Logs where the strategy does not evaluate (Strategy::runs_evaluation).
  Logs evaluate(const Dataset& data, int64_t steps = -1, int verbose = 0,
                AutoShardPolicy shard_policy = AutoShardPolicy::kAuto);
  // Outputs of the primary replica for every batch, concatenated; not sharded (every
  // worker predicts the whole dataset, as Keras does without a distributed dataset).
  at::Tensor predict(const Dataset& data, int64_t steps = -1);

  // Direct access for callbacks and custom loops.
  GradientUpdater& updater() { return updater_; }

 private:
  // Sums of one step or of many: [0] per-example loss sum, [1] examples, then each
  // metric's batch_sums in order.
  struct StepSums {
    std::vector<double> values;
    void add(const std::vector<double>& other);
  };
  // One step on every local replica; `train`: backward and the update as well.
  StepSums step(const Example& batch, int64_t global_batch, bool train);
  Logs to_logs(const std::vector<double>& totals, const std::string& prefix) const;
  using StepSource = std::function<std::optional<StepSums>()>;  // nullopt: data ran out
  Logs run_epoch(TrainContext& ctx, const StepSource& next_step,
                 std::vector<std::shared_ptr<Callback>>& callbacks, int verbose);
  // fit's epochs from ctx.initial_epoch / initial_step; appends to `history`.
  void run_epochs(TrainContext& ctx, TrainSteps& steps, FitOptions& options, History& history,
                  Logs& last);
  // run_epochs under chorus::elastic::run (trainer_elastic.cc).
  void fit_elastic(const TrainLoop& loop, TrainContext& ctx, std::unique_ptr<TrainSteps>& steps,
                   FitOptions& options, History& history, Logs& last);
  // One step's figures to chorus::report, `total_seconds` from asking for the step to its end.
  void report_step(double total_seconds, const Logs& running);

  Strategy& strategy_;
  ReplicatedModel& model_;
  ::torch::optim::Optimizer& optimizer_;
  LossFn loss_;
  std::vector<std::shared_ptr<Metric>> metrics_;
  GradientUpdater updater_;
  // The last training step's seconds, in all and in apply_gradients (waiting for the
  // gradients' collectives); for chorus::report (chorusrun --dashboard).
  bool reporting_ = false;
  double step_seconds_ = 0;
  double wait_seconds_ = 0;
  int64_t step_samples_ = 0;
  uint64_t gradient_bytes_ = 0;    // reduced per step across workers
  uint64_t gradient_tensors_ = 0;  // in that many tensors
  // An elastic fit's commit after every step and at every epoch's end; empty otherwise.
  std::function<void(const TrainContext&)> commit_;
};

}  // namespace chorus
