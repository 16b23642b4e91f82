// Distribution strategies (tf.distribute's vocabulary): where the replicas of a model
// live and how their gradients become one update.
//
//   DefaultStrategy              one replica, this process.
//   MirroredStrategy             N replicas in this process (threads on a CPU machine, one
//                                per device with CUDA), each with its own copy of the
//                                variables; gradients summed in memory, one update
//                                applied and mirrored to every copy.
//   MultiWorkerMirroredStrategy  one replica per worker process (TF_CONFIG, chorusrun,
//                                torchrun ...: see chorus::init); gradients summed with the
//                                engine's fused allreduce, started by gradient hooks so the
//                                reduction overlaps backward. The chief is rank 0 (the
//                                "chief" task, else worker 0).
//   CentralStorageStrategy       N replicas in this process sharing ONE copy of the
//                                variables; every replica's backward accumulates into the
//                                same gradients and the update is applied once, centrally.
//   ParameterServerStrategy      variables on ps tasks, steps scheduled on workers by the
//                                chief (chorus/train/ps_strategy.h).
//
// Global batch semantics (as tf.distribute): datasets are batched with the GLOBAL batch
// size; each replica gets global / num_replicas_in_sync examples per step; each replica's
// loss is divided by the global batch size (compute_average_loss) and gradients are
// SUMMED over replicas, so the update equals one process training on the whole batch.
//
// Thread safety: one training thread drives a strategy; run() calls `fn` concurrently on
// the local replicas' threads.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "chorus/dtype.h"
#include "chorus/engine.h"
#include "chorus/train/dataset.h"
#include "chorus/train/model.h"

namespace chorus {

class ReplicaPool;
struct TrainContext;

// What one replica sees inside Strategy::run.
struct ReplicaContext {
  int local_replica = 0;       // index among this process's replicas (the Model to use)
  int replica_id_in_sync = 0;  // index among all replicas of all workers
  int num_replicas_in_sync = 1;
};

// sum(per_example_loss) / global_batch_size: a replica's share of the global mean loss.
// REQUIRES global_batch_size > 0 (InvalidArgument).
at::Tensor compute_average_loss(const at::Tensor& per_example_loss, int64_t global_batch_size);

// Turns the replicas' gradients into one update (see GradientUpdater below).
class GradientSync;

// After every local replica's backward: reduce the gradients across replicas, apply the
// optimizer once, bring mirrors up to date, zero the gradients for the next step.
class GradientUpdater {
 public:
  GradientUpdater(std::unique_ptr<GradientSync> sync);
  ~GradientUpdater();
  GradientUpdater(GradientUpdater&&) noexcept;
  GradientUpdater& operator=(GradientUpdater&&) noexcept;
  // Throws what the engine throws (IoError, TimeoutError) when a peer is gone.
  void apply_gradients();
  void zero_grad();
  ::torch::optim::Optimizer& optimizer();

 private:
  std::unique_ptr<GradientSync> sync_;
};

// What Trainer::fit hands the strategy (Strategy::make_train_steps).
struct TrainLoop {
  Dataset data;                  // the GLOBAL dataset, batched with the global batch size
  int64_t global_batch = 0;      // data.batch_size()
  int64_t steps_per_epoch = -1;  // FitOptions::steps_per_epoch
  AutoShardPolicy shard_policy = AutoShardPolicy::kAuto;
  // One training step on this process's replicas (forward, backward, the update) on a
  // batch of this worker's data, its loss averaged over `global_batch` examples. Returns
  // the step's loss and metric sums.
  std::function<std::vector<double>(const Example& batch, int64_t global_batch)> step;
};

// Where the steps of Trainer::fit's epochs come from, as a strategy decides.
class TrainSteps {
 public:
  virtual ~TrainSteps() = default;
  // Before each epoch's steps; ctx.epoch and ctx.step say where it starts (after a
  // restore, BackupAndRestore moves them).
  virtual void begin_epoch(const TrainContext& ctx) = 0;
  // The loss and metric sums of the next step, summed over this process's replicas (or
  // over whatever ran it); nullopt when the data ran out.
  virtual std::optional<std::vector<double>> next() = 0;
  // After the last epoch, also after an early stop.
  virtual void end() {}
};

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  virtual std::string name() const = 0;
  int num_workers() const { return num_workers_; }
  int worker_index() const { return worker_index_; }
  int num_local_replicas() const { return local_replicas_; }
  int num_replicas_in_sync() const { return num_workers_ * local_replicas_; }
  virtual bool is_chief() const { return worker_index_ == 0; }
  // The engine between workers; nullptr with one worker.
  Engine* engine() const { return engine_; }

  // "strategy.scope()": builds this process's replicas with `factory` and makes every
  // replica of every worker start from the chief's first replica's values.
  virtual ReplicatedModel make_model(const ModelFactory& factory);
  template <typename Holder>
  ReplicatedModel make_model(std::function<Holder()> make) {
    return make_model(model_factory<Holder>(std::move(make)));
  }
  // The update path for `optimizer`, which must be built on model.parameters().
  virtual GradientUpdater make_updater(ReplicatedModel& model,
                                       ::torch::optim::Optimizer& optimizer);

  // Calls fn(ReplicaContext&) on every local replica at once (replica 0 on the calling
  // thread) and returns the results in local replica order. The first exception thrown
  // by any replica is rethrown after all have finished.
  template <typename Fn>
  auto run(Fn&& fn) -> std::vector<std::invoke_result_t<Fn&, ReplicaContext&>> {
    using R = std::invoke_result_t<Fn&, ReplicaContext&>;
    std::vector<R> results(static_cast<size_t>(local_replicas_));
    run_each(
        [&](ReplicaContext& ctx) { results[static_cast<size_t>(ctx.local_replica)] = fn(ctx); });
    return results;
  }

  // Over all replicas of all workers: kSum or kAverage of the values (one per local
  // replica, or any number: they are summed locally first; kAverage divides by
  // num_replicas_in_sync). Collective: every worker calls it in the same order.
  double reduce(ReduceOp op, const std::vector<double>& local_values);
  // Elementwise sum over workers (metric states); collective.
  std::vector<double> sum_across_workers(std::vector<double> values);
  // The chief's bytes on every worker; collective.
  void broadcast_from_chief(std::string& bytes);
  void barrier();

  // This worker's part of a dataset batched with the global batch size (see
  // Dataset::distribute); a no-op with one worker. Each batch then holds
  // num_local_replicas() replica batches (split_batch).
  virtual Dataset distribute_dataset(const Dataset& global,
                                     AutoShardPolicy policy = AutoShardPolicy::kAuto) const;

  // Variables kept outside the model (ParameterServerStrategy's ps tasks); no-ops here.
  // refresh_model: bring `model` up to date before evaluating or saving it.
  // save_variables / restore_variables: add them to / take them from checkpoint files.
  virtual void refresh_model(ReplicatedModel& model);
  virtual void save_variables(ReplicatedModel& model, std::map<std::string, std::string>& files);
  virtual void restore_variables(ReplicatedModel& model,
                                 const std::map<std::string, std::string>& files);

  // ---- the part of Trainer::fit / evaluate that differs between strategies ----
  // Called once per fit(), before on_train_begin: sets ctx.steps_per_epoch (-1 while
  // unknown) and returns the source of the epochs' steps. The default runs loop.step on
  // every batch of this worker's part of the data (distribute_dataset): a fresh pass per
  // epoch, or with loop.steps_per_epoch one pass across epochs. nullptr: this process has
  // already served the job's steps (a ParameterServerStrategy worker) and fit returns an
  // empty History. InvalidArgument when the loop cannot run under this strategy.
  virtual std::unique_ptr<TrainSteps> make_train_steps(const TrainLoop& loop, TrainContext& ctx);
  // Whether evaluate() runs here; false: it returns empty Logs (a ParameterServerStrategy
  // worker, whose chief evaluates alone). Default: true.
  virtual bool runs_evaluation() const { return true; }

  // ---- elastic fit (FitOptions::elastic, docs/elastic.md) ----
  // Whether Trainer::fit can ride out workers leaving and joining under this strategy:
  // MultiWorkerMirroredStrategy on chorus::init()'s runtime in an elastic job.
  virtual bool elastic() const { return false; }
  // After the runtime re-formed its world (chorus/elastic.h): takes the new worker count,
  // index and engine. InvalidArgument unless elastic().
  virtual void rejoin();

 protected:
  Strategy(int num_workers, int worker_index, int local_replicas, Engine* engine);
  // A new world: its workers, this worker's index, its engine; collective names restart.
  void set_workers(int num_workers, int worker_index, Engine* engine);
  void run_each(const std::function<void(ReplicaContext&)>& fn);

 private:
  int num_workers_;
  int worker_index_;
  int local_replicas_;
  Engine* engine_;
  std::unique_ptr<ReplicaPool> pool_;
  uint64_t collective_counter_ = 0;
};

class DefaultStrategy : public Strategy {
 public:
  DefaultStrategy();
  std::string name() const override { return "DefaultStrategy"; }
};

class MirroredStrategy : public Strategy {
 public:
  // REQUIRES num_replicas >= 1.
  explicit MirroredStrategy(int num_replicas);
  std::string name() const override { return "MirroredStrategy"; }
};

class CentralStorageStrategy : public Strategy {
 public:
  explicit CentralStorageStrategy(int num_replicas);
  std::string name() const override { return "CentralStorageStrategy"; }
  ReplicatedModel make_model(const ModelFactory& factory) override;
  using Strategy::make_model;
};

class MultiWorkerMirroredStrategy : public Strategy {
 public:
  // Joins the job (chorus::init() unless already initialised) and uses its engine; the
  // destructor leaves it (chorus::shutdown()) when this constructor joined it.
  MultiWorkerMirroredStrategy();
  // Workers are the ranks of `engine` (tests run workers as threads this way).
  explicit MultiWorkerMirroredStrategy(Engine& engine);
  ~MultiWorkerMirroredStrategy() override;
  std::string name() const override { return "MultiWorkerMirroredStrategy"; }
  // In an elastic job (and not on an engine given to the constructor). There make_model
  // does not broadcast the chief's values: a worker that joins later would broadcast
  // alone; the elastic fit syncs the model from the worker that trained most instead.
  bool elastic() const override;
  void rejoin() override;

 private:
  explicit MultiWorkerMirroredStrategy(bool owns_runtime);
  bool owns_runtime_;
  bool on_runtime_ = false;  // uses chorus::init()'s engine (not one given)
};

}  // namespace chorus
