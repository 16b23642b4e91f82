// Trainer: fit / evaluate / predict over a Strategy.
#include "chorus/train/trainer.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "chorus/elastic.h"
#include "chorus/error.h"
#include "chorus/report.h"
#include "chorus/torch/elastic_state.h"
#include "train/progress_bar.h"
#include "util/log.h"

namespace chorus {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void Trainer::StepSums::add(const std::vector<double>& other) {
  if (values.empty()) values.assign(other.size(), 0.0);
  CHORUS_CHECK_ARG(other.size() == values.size(), "Trainer: a step returned ", other.size(),
                   " sums, expected ", values.size());
  for (size_t i = 0; i < other.size(); ++i) values[i] += other[i];
}

namespace {

void check_example(const Example& batch) {
  CHORUS_CHECK_ARG(batch.size() == 2 && batch[0].defined() && batch[1].defined(),
                   "Trainer: a dataset element must be {input, target}, got ", batch.size(),
                   " component(s)");
}

int64_t global_batch_of(const Dataset& data) {
  const int64_t b = data.batch_size();
  CHORUS_CHECK_ARG(b > 0, "Trainer: batch the dataset with the global batch size (",
                   data.describe(), " has no batch stage)");
  return b;
}

bool stdout_is_terminal() { return isatty(fileno(stdout)) == 1; }

}  // namespace

std::vector<double> History::get(const std::string& name) const {
  std::vector<double> out;
  for (const Logs& logs : epochs) {
    auto it = logs.find(name);
    CHORUS_CHECK_ARG(it != logs.end(), "History: no metric named '", name, "'");
    out.push_back(it->second);
  }
  return out;
}

Trainer::Trainer(Strategy& strategy, ReplicatedModel& model, ::torch::optim::Optimizer& optimizer,
                 LossFn loss, std::vector<std::shared_ptr<Metric>> metrics)
    : strategy_(strategy),
      model_(model),
      optimizer_(optimizer),
      loss_(std::move(loss)),
      metrics_(std::move(metrics)),
      updater_(strategy.make_updater(model, optimizer)) {
  CHORUS_CHECK_ARG(static_cast<bool>(loss_), "Trainer: a loss function is required");
}

Trainer::~Trainer() = default;

// One replica's forward (and, when training, backward) on its part of the batch.
static std::vector<double> replica_step(Model& model, const Example& part, const LossFn& loss_fn,
                                        const std::vector<std::shared_ptr<Metric>>& metrics,
                                        int64_t global_batch, bool train) {
  const int64_t rows = part[0].size(0);
  std::vector<double> sums{0.0, static_cast<double>(rows)};
  at::Tensor output;
  if (rows > 0) {
    // The gradient mode is per thread: set it on the replica's own thread.
    at::AutoGradMode grad_mode(train);
    output = model.forward(part[0]);
    at::Tensor per_example = loss_fn(output, part[1]);
    if (train) compute_average_loss(per_example, global_batch).backward();
    sums[0] = per_example.detach().sum().item<double>();
    output = output.detach();
  }
  for (const auto& m : metrics) {
    if (rows == 0) {
      sums.insert(sums.end(), m->num_sums(), 0.0);
    } else {
      auto s = m->batch_sums(output, part[1]);
      sums.insert(sums.end(), s.begin(), s.end());
    }
  }
  return sums;
}

Trainer::StepSums Trainer::step(const Example& batch, int64_t global_batch, bool train) {
  check_example(batch);
  const auto parts = strategy_.num_local_replicas() == 1
                         ? std::vector<Example>{batch}
                         : split_batch(batch, strategy_.num_local_replicas());
  auto per_replica = strategy_.run([&](ReplicaContext& r) {
    return replica_step(model_.replica(r.local_replica),
                        parts[static_cast<size_t>(r.local_replica)], loss_, metrics_, global_batch,
                        train);
  });
  if (train) {
    const auto t =
        reporting_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    updater_.apply_gradients();
    if (reporting_) wait_seconds_ = seconds_since(t);
  }
  StepSums sums;
  for (const auto& s : per_replica) sums.add(s);
  return sums;
}

Logs Trainer::to_logs(const std::vector<double>& totals, const std::string& prefix) const {
  Logs logs;
  if (totals.size() < 2 || totals[1] <= 0) return logs;
  logs[prefix + "loss"] = totals[0] / totals[1];
  size_t offset = 2;
  for (const auto& m : metrics_) {
    const size_t width = m->num_sums();
    std::vector<double> mine(totals.begin() + static_cast<long>(offset),
                             totals.begin() + static_cast<long>(offset + width));
    logs[prefix + m->name()] = m->result(mine);
    offset += width;
  }
  return logs;
}

void Trainer::report_step(double total_seconds, const Logs& running) {
  report::Step s;
  s.samples = step_samples_;
  s.wait_seconds = wait_seconds_;
  s.compute_seconds = std::max(0.0, step_seconds_ - wait_seconds_);
  s.data_seconds = std::max(0.0, total_seconds - step_seconds_);
  s.collective_bytes = gradient_bytes_;
  s.collective_tensors = gradient_tensors_;
  report::step(s);
  for (const auto& [name, value] : running) report::scalar(name, value);
  step_seconds_ = wait_seconds_ = 0;
  step_samples_ = 0;
}

Logs Trainer::run_epoch(TrainContext& ctx, const StepSource& next_step,
                        std::vector<std::shared_ptr<Callback>>& callbacks, int verbose) {
  const bool show = verbose == 1 && strategy_.is_chief();
  ProgressBar bar(ctx.steps_per_epoch, stdout, stdout_is_terminal());
  StepSums epoch;
  Logs running;
  while (ctx.steps_per_epoch < 0 || ctx.step < ctx.steps_per_epoch) {
    for (auto& c : callbacks) c->on_train_batch_begin(ctx);
    const auto t =
        reporting_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    std::optional<StepSums> sums = next_step();
    const double total = reporting_ ? seconds_since(t) : 0;
    if (!sums) {
      if (ctx.steps_per_epoch >= 0) {
        CHORUS_LOG(kWarning, "trainer")
            << "the training data ran out after " << ctx.step << " steps of epoch " << ctx.epoch
            << "; stopping (repeat() the dataset for steps_per_epoch)";
        ctx.stop_training = true;
      }
      break;
    }
    epoch.add(sums->values);
    ++ctx.step;
    ++ctx.global_step;
    running = to_logs(epoch.values, "");
    if (reporting_) report_step(total, running);
    for (auto& c : callbacks) c->on_train_batch_end(ctx, running);
    if (show) bar.update(ctx.step, running);
    if (commit_) commit_(ctx);
  }
  Logs logs = to_logs(strategy_.sum_across_workers(epoch.values), "");
  if (show) bar.finish(ctx.step, logs);
  return logs;
}

History Trainer::fit(const Dataset& train, FitOptions options) {
  CHORUS_CHECK_ARG(options.epochs >= 1, "fit: epochs must be >= 1, got ", options.epochs);
  CHORUS_CHECK_ARG(options.steps_per_epoch == -1 || options.steps_per_epoch > 0,
                   "fit: steps_per_epoch must be > 0 or -1, got ", options.steps_per_epoch);
  TrainLoop loop;
  loop.data = train;
  loop.global_batch = global_batch_of(train);
  loop.steps_per_epoch = options.steps_per_epoch;
  loop.shard_policy = options.shard_policy;
  loop.step = [this](const Example& batch, int64_t global_batch) {
    const auto t =
        reporting_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    auto values = step(batch, global_batch, /*train=*/true).values;
    if (reporting_) {
      step_seconds_ = seconds_since(t);
      step_samples_ = batch.at(0).size(0);
    }
    return values;
  };
  // Under chorusrun --dashboard: steps, samples, time breakdown, the running logs and the
  // engine's counters go to the launcher's page (docs/dashboard.md).
  reporting_ = report::enabled();
  std::unique_ptr<report::SourceToken> engine_watch;
  if (reporting_) {
    if (strategy_.engine()) engine_watch = report::watch_engine(*strategy_.engine());
    gradient_bytes_ = gradient_tensors_ = 0;
    if (strategy_.num_workers() > 1) {
      for (const auto& p : model_.parameters()) {
        gradient_bytes_ += p.numel() * p.element_size();
        ++gradient_tensors_;
      }
    }
  }
  TrainContext ctx;
  ctx.strategy = &strategy_;
  ctx.model = &model_;
  ctx.optimizer = &optimizer_;
  ctx.epochs = options.epochs;
  // What differs between strategies: where the steps come from (the local data, or steps
  // scheduled on other workers), and whether this process runs the loop at all.
  std::unique_ptr<TrainSteps> steps = strategy_.make_train_steps(loop, ctx);
  if (!steps) return History{};
  auto& callbacks = options.callbacks;
  model_.train(true);
  updater_.zero_grad();
  for (auto& c : callbacks) c->on_train_begin(ctx);

  History history;
  Logs last;
  if (options.elastic) {
    fit_elastic(loop, ctx, steps, options, history, last);
  } else {
    run_epochs(ctx, *steps, options, history, last);
  }
  steps->end();
  for (auto& c : callbacks) c->on_train_end(ctx, last);
  return history;
}

void Trainer::run_epochs(TrainContext& ctx, TrainSteps& steps, FitOptions& options,
                         History& history, Logs& last) {
  auto& callbacks = options.callbacks;
  // Where to start: BackupAndRestore (or an elastic sync) may have moved ctx.initial_epoch
  // and initial_step.
  const bool chief_prints = strategy_.is_chief() && options.verbose > 0;
  for (ctx.epoch = ctx.initial_epoch; ctx.epoch < options.epochs && !ctx.stop_training;
       ++ctx.epoch) {
    ctx.step = ctx.epoch == ctx.initial_epoch ? ctx.initial_step : 0;
    steps.begin_epoch(ctx);
    if (chief_prints && options.verbose == 1) {
      std::printf("Epoch %d/%d\n", ctx.epoch + 1, options.epochs);
      std::fflush(stdout);
    }
    for (auto& c : callbacks) c->on_epoch_begin(ctx);
    const StepSource next_step = [&]() -> std::optional<StepSums> {
      std::optional<std::vector<double>> sums = steps.next();
      if (!sums) return std::nullopt;
      return StepSums{std::move(*sums)};
    };
    Logs logs = run_epoch(ctx, next_step, callbacks, options.verbose);
    if (ctx.steps_per_epoch < 0) ctx.steps_per_epoch = ctx.step;  // the first pass's length
    if (commit_) commit_(ctx);  // the epoch's steps are done (an elastic fit)
    if (options.validation_data) {
      Logs val =
          evaluate(*options.validation_data, options.validation_steps, 0, options.shard_policy);
      for (const auto& [k, v] : val) logs["val_" + k] = v;
    }
    if (chief_prints) {
      std::printf("epoch %d/%d:%s\n", ctx.epoch + 1, options.epochs,
                  ProgressBar::metrics(logs).c_str());
      std::fflush(stdout);
    }
    for (auto& c : callbacks) c->on_epoch_end(ctx, logs);
    history.epochs.push_back(logs);
    last = logs;
  }
}

Logs Trainer::evaluate(const Dataset& data, int64_t steps, int verbose,
                       AutoShardPolicy shard_policy) {
  const int64_t global_batch = global_batch_of(data);
  if (!strategy_.runs_evaluation()) return {};
  strategy_.refresh_model(model_);
  DatasetIterator it = strategy_.distribute_dataset(data, shard_policy).iterate(0);
  model_.train(false);
  StepSums total;
  int64_t done = 0;
  try {
    while (steps < 0 || done < steps) {
      std::optional<Example> batch = it.next();
      if (!batch) break;
      total.add(step(*batch, global_batch, /*train=*/false).values);
      ++done;
    }
  } catch (...) {
    model_.train(true);
    throw;
  }
  model_.train(true);
  Logs logs = to_logs(strategy_.sum_across_workers(total.values), "");
  if (verbose > 0 && strategy_.is_chief()) {
    std::printf("evaluate: %lld steps%s\n", static_cast<long long>(done),
                ProgressBar::metrics(logs).c_str());
    std::fflush(stdout);
  }
  return logs;
}

at::Tensor Trainer::predict(const Dataset& data, int64_t steps) {
  strategy_.refresh_model(model_);
  DatasetIterator it = data.iterate(0);
  at::NoGradGuard no_grad;
  model_.train(false);
  std::vector<at::Tensor> outputs;
  for (int64_t done = 0; steps < 0 || done < steps; ++done) {
    std::optional<Example> batch = it.next();
    if (!batch) break;
    CHORUS_CHECK_ARG(!batch->empty(), "predict: an empty dataset element");
    outputs.push_back(model_.primary().forward((*batch)[0]));
  }
  model_.train(true);
  CHORUS_CHECK_ARG(!outputs.empty(), "predict: the dataset yielded no batch");
  return at::cat(outputs, 0);
}

// ---- FitOptions::elastic (docs/elastic.md): the epochs under chorus::elastic::run ----

void Trainer::fit_elastic(const TrainLoop& loop, TrainContext& ctx,
                          std::unique_ptr<TrainSteps>& steps, FitOptions& options, History& history,
                          Logs& last) {
  CHORUS_CHECK_ARG(strategy_.elastic(),
                   "fit: elastic needs MultiWorkerMirroredStrategy on "
                   "chorus::init()'s runtime in an elastic job (chorusrun --min-np ...; "
                   "docs/elastic.md), not ",
                   strategy_.name(), " here");
  elastic::TorchState state(model_.module(), optimizer_);
  // Where the last committed step left off: after the epoch's last step, the next epoch.
  commit_ = [&](const TrainContext& c) {
    const bool epoch_done = c.steps_per_epoch > 0 && c.step >= c.steps_per_epoch;
    state.value("epoch") = epoch_done ? c.epoch + 1 : c.epoch;
    state.value("step") = epoch_done ? 0 : c.step;
    state.value("global_step") = c.global_step;
    state.commit();
  };
  // The new world's shards, updater and step source (the global batch stays as it is:
  // each worker's share of it changes).
  state.register_reset_callback([&] {
    strategy_.rejoin();
    updater_ = strategy_.make_updater(model_, optimizer_);
    steps = strategy_.make_train_steps(loop, ctx);
  });
  try {
    elastic::run(state, [&](elastic::State&) {
      ctx.initial_epoch = static_cast<int>(state.value("epoch"));
      ctx.initial_step = state.value("step");
      ctx.global_step = state.value("global_step");
      model_.sync_replicas();
      updater_.zero_grad();
      run_epochs(ctx, *steps, options, history, last);
    });
  } catch (...) {
    commit_ = nullptr;
    throw;
  }
  commit_ = nullptr;
}

}  // namespace chorus
