// ParameterServerStrategy: tf.distribute's parameter-server training. The variables live on
// `ps` tasks (sharded by a size-balanced partitioner), the optimizer runs there (SGD with
// momentum / Nesterov, Adam, with their slots), workers pull parameters, compute gradients
// on their own data and push them, and the chief coordinates: it schedules steps on idle
// workers and reruns a step elsewhere when its worker dies (docs/ps.md).
//
// The same program runs in every role (cluster from TF_CONFIG, `chorusrun --ps K -np N`,
// or an explicit ClusterSpec):
//   ps      the constructor serves the variables until the chief ends the job, then exits
//           the process with status 0 (like tf.distribute.Server.join()); with
//           Options::exit_after_serving = false it returns and role() says kPs.
//   worker  make_model / make_updater build a local replica and wait for the chief's
//           variables; Trainer::fit serves the steps the chief schedules and returns an
//           empty History once the chief is done (a custom loop calls serve()).
//   chief   make_updater creates the variables on the ps tasks from its model and its
//           optimizer (torch SGD or Adam: the ps applies the same arithmetic); Trainer::fit
//           schedules num_workers steps per global step; evaluation and checkpoints pull
//           the current variables into the chief's model. The destructor shuts workers and
//           ps tasks down.
//
// Update modes (Options::mode): kAsync (default; every push applied on arrival), kSync
// (the ps applies the mean of one push per worker per round), kBoundedStaleness (async, but
// no worker more than Options::max_staleness steps ahead of the slowest).
//
// Batches: datasets are batched with the GLOBAL batch size, as for the other strategies;
// a scheduled step on worker w trains on w's chunk of a global batch (global / workers
// examples, loss averaged over them), so one round of num_workers steps covers one global
// batch. num_replicas_in_sync() is the number of workers.
//
// Errors: InvalidArgument for a bad cluster or an optimizer the ps cannot run;
// UnavailableError when a ps is gone (restart the job: BackupAndRestore resumes it);
// TimeoutError when the other tasks do not show up in time.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/ps/cluster.h"
#include "chorus/ps/coordinator.h"
#include "chorus/ps/optimizer.h"
#include "chorus/train/strategy.h"

namespace chorus {

namespace ps {
class PsClient;
}

// What a scheduled step sees on the worker that runs it. The model's parameters were just
// pulled from the ps tasks; the strategy's GradientUpdater::apply_gradients() pushes the
// gradients (and in kSync tags them with the round the parameters came from).
struct PsStepContext {
  int worker_index = 0;
  int64_t step = 0;             // the chief's running count of scheduled steps
  const std::string& argument;  // the bytes given to schedule()
  ReplicatedModel& model;
};
// Returns numbers for the chief (losses, metric sums): RemoteValue bytes, see values().
using PsStepFn = std::function<std::vector<double>(PsStepContext&)>;

class ParameterServerStrategy : public Strategy {
 public:
  struct Options {
    ps::UpdateMode mode = ps::UpdateMode::kAsync;
    int max_staleness = 2;           // kBoundedStaleness
    int64_t max_shard_elements = 0;  // partitioner; 0: its default
    bool exit_after_serving = true;  // ps role: exit(0) after serving (see above)
    // Trainer::fit on the chief keeps this many rounds scheduled, so workers do not wait
    // for the chief between rounds (1: each round waits for the previous one).
    int rounds_in_flight = 2;
    // Waiting for tasks to start and for every later reply; 0: CHORUS_TIMEOUT_SECONDS.
    std::chrono::milliseconds timeout{0};
  };

  ParameterServerStrategy();  // TF_CONFIG, default options
  explicit ParameterServerStrategy(Options options);
  ParameterServerStrategy(ps::ClusterSpec cluster, Secret secret, Options options);
  ~ParameterServerStrategy() override;

  std::string name() const override { return "ParameterServerStrategy"; }
  bool is_chief() const override;
  ps::Role role() const;
  const ps::ClusterSpec& cluster() const;
  const Options& options() const;

  ReplicatedModel make_model(const ModelFactory& factory) override;
  using Strategy::make_model;
  // Chief: creates (or, on a restarted chief, re-creates) the variables on the ps tasks.
  // Worker: waits for them. InvalidArgument for an optimizer other than SGD (dampening 0)
  // or Adam (no amsgrad).
  GradientUpdater make_updater(ReplicatedModel& model,
                               ::torch::optim::Optimizer& optimizer) override;
  // Chief: the whole dataset (it does not train on it); worker w: its part.
  Dataset distribute_dataset(const Dataset& global,
                             AutoShardPolicy policy = AutoShardPolicy::kAuto) const override;

  // Custom loops. Every task defines the same steps (by name) after make_updater().
  void define_step(const std::string& name, PsStepFn fn);
  // Chief: queues a step for the next idle worker. In kSync, schedule whole rounds
  // (num_workers steps) before join().
  ps::RemoteValue schedule(const std::string& name, const std::string& argument = {});
  // Chief: waits for every scheduled step; rethrows the first failure.
  void join();
  // The numbers a step function returned, from its RemoteValue (waits for it).
  static std::vector<double> values(const ps::RemoteValue& value);
  // Worker: runs scheduled steps until the chief finishes. No-op on the chief.
  void serve();
  // Chief: shuts the workers and ps tasks down (the destructor does it too). Idempotent.
  void finish();

  // Chief: copies the current variables from the ps tasks into `model`.
  void refresh_model(ReplicatedModel& model) override;
  void save_variables(ReplicatedModel& model, std::map<std::string, std::string>& files) override;
  void restore_variables(ReplicatedModel& model,
                         const std::map<std::string, std::string>& files) override;

  // Trainer::fit (ps_strategy_fit.cc). Worker: serves the chief's steps, each loop.step on
  // its next batch, until the chief finishes; returns nullptr. Chief: the steps are
  // rounds of num_workers scheduled steps, kept Options::rounds_in_flight ahead; needs
  // loop.steps_per_epoch or a dataset of known cardinality (InvalidArgument).
  std::unique_ptr<TrainSteps> make_train_steps(const TrainLoop& loop, TrainContext& ctx) override;
  // Only the chief evaluates, with the ps tasks' variables.
  bool runs_evaluation() const override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
