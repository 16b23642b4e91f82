// Strategies: replica threads, gradient reduction paths and cross-worker reductions.
#include "chorus/train/strategy.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "chorus/error.h"
#include "chorus/job.h"
#include "chorus/torch/broadcast.h"
#include "chorus/torch/optimizer.h"
#include "chorus/torch/runtime.h"
#include "chorus/torch/tensor_ops.h"
#include "chorus/train/callbacks.h"
#include "train/gradient_sync.h"
#include "train/replica_pool.h"

namespace chorus {

// ---- ReplicatedModel ------------------------------------------------------------------

void ReplicatedModel::train(bool on) {
  for (Model& m : replicas_) m.module->train(on);
}

void ReplicatedModel::sync_replicas() {
  if (shared_variables_ || replicas_.size() < 2) return;
  at::NoGradGuard no_grad;
  auto src_params = replicas_[0].module->parameters();
  auto src_buffers = replicas_[0].module->buffers();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    auto params = replicas_[r].module->parameters();
    auto buffers = replicas_[r].module->buffers();
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(src_params[i]);
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(src_buffers[i]);
  }
}

at::Tensor compute_average_loss(const at::Tensor& per_example_loss, int64_t global_batch_size) {
  CHORUS_CHECK_ARG(global_batch_size > 0,
                   "compute_average_loss: global_batch_size must be > 0, got ", global_batch_size);
  return per_example_loss.sum() / static_cast<double>(global_batch_size);
}

// ---- gradient paths -------------------------------------------------------------------

namespace {

// Replicas in this process: the mirrors' gradients are added into the primary's, the
// optimizer steps once, the mirrors copy the result. With shared variables the replicas'
// backward passes already accumulated into one set of gradients.
class LocalSync : public GradientSync {
 public:
  LocalSync(ReplicatedModel& model, ::torch::optim::Optimizer& optimizer)
      : model_(model), optimizer_(optimizer) {}

  void apply() override {
    sum_into_primary();
    optimizer_.step();
    model_.sync_replicas();
    zero_grad();
  }

  void zero_grad() override {
    optimizer_.zero_grad();
    if (model_.shared_variables()) return;
    for (int r = 1; r < model_.num_replicas(); ++r) model_.replica(r).module->zero_grad();
  }

  ::torch::optim::Optimizer& optimizer() override { return optimizer_; }

 private:
  void sum_into_primary() {
    if (model_.shared_variables() || model_.num_replicas() < 2) return;
    at::NoGradGuard no_grad;
    auto primary = model_.primary().module->parameters();
    for (int r = 1; r < model_.num_replicas(); ++r) {
      auto mirror = model_.replica(r).module->parameters();
      for (size_t i = 0; i < primary.size(); ++i) {
        const at::Tensor& g = mirror[i].grad();
        if (!g.defined()) continue;
        if (primary[i].grad().defined()) {
          primary[i].mutable_grad().add_(g);
        } else {
          primary[i].mutable_grad() = g.clone();
        }
      }
    }
  }

  ReplicatedModel& model_;
  ::torch::optim::Optimizer& optimizer_;
};

// One replica per worker: DistributedOptimizer's hooks start each gradient's allreduce
// (sum) as backward produces it; step() waits and applies.
class WorkerSync : public GradientSync {
 public:
  WorkerSync(ReplicatedModel& model, ::torch::optim::Optimizer& optimizer, Engine* engine)
      : optimizer_(optimizer),
        distributed_(optimizer, model.module().named_parameters(), options(engine)) {}

  void apply() override {
    distributed_.step();
    distributed_.zero_grad();
  }
  void zero_grad() override { distributed_.zero_grad(); }
  ::torch::optim::Optimizer& optimizer() override { return optimizer_; }

 private:
  static DistributedOptimizerOptions options(Engine* engine) {
    DistributedOptimizerOptions o;
    o.op = ReduceOp::kSum;  // replicas' losses are already divided by the global batch
    o.engine = engine;
    return o;
  }

  ::torch::optim::Optimizer& optimizer_;
  DistributedOptimizer distributed_;
};

}  // namespace

GradientUpdater::GradientUpdater(std::unique_ptr<GradientSync> sync) : sync_(std::move(sync)) {}
GradientUpdater::~GradientUpdater() = default;
GradientUpdater::GradientUpdater(GradientUpdater&&) noexcept = default;
GradientUpdater& GradientUpdater::operator=(GradientUpdater&&) noexcept = default;
void GradientUpdater::apply_gradients() { sync_->apply(); }
void GradientUpdater::zero_grad() { sync_->zero_grad(); }
::torch::optim::Optimizer& GradientUpdater::optimizer() { return sync_->optimizer(); }

// ---- Strategy -------------------------------------------------------------------------

Strategy::Strategy(int num_workers, int worker_index, int local_replicas, Engine* engine)
    : num_workers_(num_workers),
      worker_index_(worker_index),
      local_replicas_(local_replicas),
      engine_(num_workers > 1 ? engine : nullptr),
      pool_(std::make_unique<ReplicaPool>(local_replicas)) {}

Strategy::~Strategy() = default;

ReplicatedModel Strategy::make_model(const ModelFactory& factory) {
  std::vector<Model> replicas;
  for (int r = 0; r < local_replicas_; ++r) {
    replicas.push_back(factory());
    CHORUS_CHECK_ARG(replicas.back().module && replicas.back().forward,
                     "make_model: the factory returned a Model without module or forward");
  }
  ReplicatedModel model(std::move(replicas), /*shared_variables=*/false);
  if (engine_ && !elastic()) broadcast_parameters(model.module(), 0, engine_);
  model.sync_replicas();
  return model;
}

GradientUpdater Strategy::make_updater(ReplicatedModel& model,
                                       ::torch::optim::Optimizer& optimizer) {
  CHORUS_CHECK_ARG(model.num_replicas() == local_replicas_, "make_updater: the model has ",
                   model.num_replicas(), " replicas but ", name(), " runs ", local_replicas_,
                   " per process; build it with this strategy's make_model");
  if (engine_) {
    CHORUS_CHECK_ARG(local_replicas_ == 1, name(),
                     ": several replicas per worker are not supported");
    return GradientUpdater(std::make_unique<WorkerSync>(model, optimizer, engine_));
  }
  return GradientUpdater(std::make_unique<LocalSync>(model, optimizer));
}

void Strategy::rejoin() {
  CHORUS_THROW(InvalidArgument, name(),
               " cannot follow an elastic job's resizes: use MultiWorkerMirroredStrategy "
               "on chorus::init()'s runtime under chorusrun --min-np (docs/elastic.md)");
}

void Strategy::set_workers(int num_workers, int worker_index, Engine* engine) {
  num_workers_ = num_workers;
  worker_index_ = worker_index;
  engine_ = engine;
  collective_counter_ = 0;
}

void Strategy::run_each(const std::function<void(ReplicaContext&)>& fn) {
  pool_->run([&](int replica) {
    ReplicaContext ctx;
    ctx.local_replica = replica;
    ctx.replica_id_in_sync = worker_index_ * local_replicas_ + replica;
    ctx.num_replicas_in_sync = num_replicas_in_sync();
    fn(ctx);
  });
}

double Strategy::reduce(ReduceOp op, const std::vector<double>& local_values) {
  CHORUS_CHECK_ARG(op == ReduceOp::kSum || op == ReduceOp::kAverage,
                   "Strategy::reduce supports kSum and kAverage, got ", reduce_op_name(op));
  double sum = 0;
  for (double v : local_values) sum += v;
  if (engine_) sum = metric_sum(sum, "strategy/reduce", engine_);
  return op == ReduceOp::kSum ? sum : sum / num_replicas_in_sync();
}

std::vector<double> Strategy::sum_across_workers(std::vector<double> values) {
  if (!engine_ || values.empty()) return values;
  at::Tensor t = at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kDouble);
  CollectiveOptions o;
  o.op = ReduceOp::kSum;
  o.engine = engine_;
  // A length in the name: callers with different metric sets never share a cache entry.
  allreduce_(t, "strategy/sums/" + std::to_string(values.size()), o);
  return values;
}

void Strategy::broadcast_from_chief(std::string& bytes) {
  if (engine_) broadcast_bytes(bytes, 0, "strategy/broadcast", engine_);
}

void Strategy::barrier() {
  if (engine_) chorus::barrier("strategy/barrier", engine_);
}

void Strategy::refresh_model(ReplicatedModel&) {}
void Strategy::save_variables(ReplicatedModel&, std::map<std::string, std::string>&) {}
void Strategy::restore_variables(ReplicatedModel&, const std::map<std::string, std::string>&) {}

Dataset Strategy::distribute_dataset(const Dataset& global, AutoShardPolicy policy) const {
  if (num_workers_ == 1) return global;
  return global.distribute(num_workers_, worker_index_, policy);
}

// ---- fit's steps on this worker's data ---------------------------------------------------

namespace {

// Steps on the local data: a fresh pass per epoch, or (steps_per_epoch given) one pass
// that continues across epochs, as Keras does with a repeat()ed dataset.
class LocalTrainSteps : public TrainSteps {
 public:
  LocalTrainSteps(const TrainLoop& loop, Dataset data)
      : loop_(loop), data_(std::move(data)), continuous_(loop.steps_per_epoch > 0) {}

  void begin_epoch(const TrainContext& ctx) override {
    if (continuous_) {
      if (it_) return;
      // Created at the first epoch: BackupAndRestore may have moved the start.
      it_.emplace(data_.iterate(0));
      skip(ctx.initial_epoch * ctx.steps_per_epoch + ctx.initial_step);
      return;
    }
    it_.emplace(data_.iterate(ctx.epoch));
    skip(ctx.step);
  }

  std::optional<std::vector<double>> next() override {
    std::optional<Example> batch = it_->next();
    if (!batch) return std::nullopt;
    return loop_.step(*batch, loop_.global_batch);
  }

 private:
  void skip(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if (!it_->next()) break;
    }
  }

  TrainLoop loop_;
  Dataset data_;
  bool continuous_;
  std::optional<DatasetIterator> it_;
};

}  // namespace

std::unique_ptr<TrainSteps> Strategy::make_train_steps(const TrainLoop& loop, TrainContext& ctx) {
  Dataset data = distribute_dataset(loop.data, loop.shard_policy);
  ctx.steps_per_epoch = loop.steps_per_epoch > 0 ? loop.steps_per_epoch : data.cardinality();
  if (ctx.steps_per_epoch < 0) ctx.steps_per_epoch = -1;
  return std::make_unique<LocalTrainSteps>(loop, std::move(data));
}

// ---- the strategies -------------------------------------------------------------------

DefaultStrategy::DefaultStrategy() : Strategy(1, 0, 1, nullptr) {}

MirroredStrategy::MirroredStrategy(int num_replicas) : Strategy(1, 0, num_replicas, nullptr) {}

CentralStorageStrategy::CentralStorageStrategy(int num_replicas)
    : Strategy(1, 0, num_replicas, nullptr) {}

ReplicatedModel CentralStorageStrategy::make_model(const ModelFactory& factory) {
  Model model = factory();
  CHORUS_CHECK_ARG(model.module && model.forward,
                   "make_model: the factory returned a Model without module or forward");
  return ReplicatedModel(std::vector<Model>(static_cast<size_t>(num_local_replicas()), model),
                         /*shared_variables=*/true);
}

namespace {
// True when this call joined the job (and so the strategy must leave it).
bool join_job_if_needed() {
  if (initialized()) return false;
  init();
  return true;
}
}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy()
    : MultiWorkerMirroredStrategy(join_job_if_needed()) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(bool owns_runtime)
    : Strategy(chorus::size(), chorus::rank(), 1, &default_engine()),
      owns_runtime_(owns_runtime),
      on_runtime_(true) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(Engine& engine)
    : Strategy(engine.size(), engine.rank(), 1, &engine), owns_runtime_(false) {}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() {
  if (owns_runtime_) shutdown();
}

bool MultiWorkerMirroredStrategy::elastic() const {
  return on_runtime_ && initialized() && detail::job().elastic();
}

void MultiWorkerMirroredStrategy::rejoin() {
  if (!elastic()) Strategy::rejoin();
  set_workers(chorus::size(), chorus::rank(), &default_engine());
}

}  // namespace chorus
