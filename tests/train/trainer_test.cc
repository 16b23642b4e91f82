// Trainer.fit under every strategy, the custom-loop API, and the callbacks, on a small
// fixed classification problem. References: the single-replica run (same seed, same global
// batch) and hand-computed values.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "train_harness.h"

namespace chorus {
namespace {

using namespace train_testing;
using engine::testing::EngineGroup;
using engine::testing::error_of;

constexpr int64_t kRows = 256;
constexpr int64_t kGlobalBatch = 32;  // 8 steps per epoch

Dataset training_data() { return classification_data(kRows).shuffle(kRows, 7).batch(kGlobalBatch); }

struct FitRun {
  History history;
  at::Tensor params;
};

FitOptions quiet(int epochs) {
  FitOptions o;
  o.epochs = epochs;
  o.verbose = 0;
  return o;
}

FitRun fit_with(Strategy& strategy, FitOptions options, double momentum = 0.0) {
  ReplicatedModel model = strategy.make_model(mlp_factory());
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.5).momentum(momentum));
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy(),
                  {metrics::sparse_categorical_accuracy()});
  FitRun run;
  run.history = trainer.fit(training_data(), std::move(options));
  run.params = torch_testing::flat_params(model.module()).clone();
  return run;
}

void expect_same_curve(const FitRun& a, const FitRun& b, double tol) {
  auto la = a.history.get("loss"), lb = b.history.get("loss");
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], tol) << "epoch " << i;
  EXPECT_TRUE(torch::allclose(a.params, b.params, 1e-5, 1e-6));
}

TEST(StrategyTest, LossCurvesOfOneAndTwoReplicasAgree) {
  DefaultStrategy one;
  FitRun reference = fit_with(one, quiet(4));
  auto loss = reference.history.get("loss");
  ASSERT_EQ(loss.size(), 4u);
  EXPECT_LT(loss.back(), loss.front()) << "the reference run must learn";

  MirroredStrategy mirrored(2);
  expect_same_curve(reference, fit_with(mirrored, quiet(4)), 1e-5);
  CentralStorageStrategy central(2);
  expect_same_curve(reference, fit_with(central, quiet(4)), 1e-5);
  MirroredStrategy four(4);
  expect_same_curve(reference, fit_with(four, quiet(4)), 1e-5);
}

TEST(StrategyTest, MultiWorkerMirroredMatchesOneReplicaAndKeepsWorkersIdentical) {
  DefaultStrategy one;
  FitRun reference = fit_with(one, quiet(3), 0.9);
  EngineGroup group(2);
  std::vector<FitRun> runs(2);
  group.run([&](int rank, Engine& engine) {
    MultiWorkerMirroredStrategy strategy(engine);
    EXPECT_EQ(strategy.num_replicas_in_sync(), 2);
    EXPECT_EQ(strategy.is_chief(), rank == 0);
    runs[static_cast<size_t>(rank)] = fit_with(strategy, quiet(3), 0.9);
  });
  expect_same_curve(reference, runs[0], 1e-5);
  EXPECT_TRUE(torch::equal(runs[0].params, runs[1].params)) << "workers diverged";
  EXPECT_EQ(runs[0].history.get("accuracy"), runs[1].history.get("accuracy"));
}

TEST(StrategyTest, MirroredReplicasStayBitIdentical) {
  MirroredStrategy strategy(3);
  ReplicatedModel model = strategy.make_model(mlp_factory());
  torch::optim::SGD sgd(model.parameters(), 0.3);
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy());
  trainer.fit(training_data(), quiet(2));
  auto p0 = torch_testing::flat_params(*model.replica(0).module);
  for (int r = 1; r < 3; ++r) {
    EXPECT_TRUE(torch::equal(p0, torch_testing::flat_params(*model.replica(r).module))) << r;
  }
}

TEST(StrategyTest, CustomLoopWithRunAndComputeAverageLoss) {
  // One step by hand under MirroredStrategy(2) equals one SGD step on the whole batch.
  MirroredStrategy strategy(2);
  ReplicatedModel model = strategy.make_model(mlp_factory());
  torch::optim::SGD sgd(model.parameters(), 0.5);
  GradientUpdater updater = strategy.make_updater(model, sgd);
  Example batch{torch_testing::inputs(0, 16), torch_testing::labels(0, 16)};
  auto parts = split_batch(batch, 2);
  LossFn loss_fn = losses::sparse_categorical_crossentropy();
  auto losses = strategy.run([&](ReplicaContext& ctx) {
    EXPECT_EQ(ctx.num_replicas_in_sync, 2);
    const Example& part = parts[static_cast<size_t>(ctx.local_replica)];
    auto loss = compute_average_loss(
        loss_fn(model.replica(ctx.local_replica).forward(part[0]), part[1]), 16);
    loss.backward();
    return loss.item<double>();
  });
  updater.apply_gradients();

  auto single = torch_testing::make_mlp();
  torch_testing::fill(*single, 0.1);
  torch::optim::SGD ref(single->parameters(), 0.5);
  auto ref_loss = torch::nn::functional::cross_entropy(single->forward(batch[0]), batch[1]);
  ref_loss.backward();
  ref.step();
  EXPECT_NEAR(strategy.reduce(ReduceOp::kSum, losses), ref_loss.item<double>(), 1e-6);
  EXPECT_TRUE(torch::allclose(torch_testing::flat_params(model.module()),
                              torch_testing::flat_params(*single), 1e-5, 1e-6));
  EXPECT_NEAR(strategy.reduce(ReduceOp::kAverage, {1.0, 3.0}), 2.0, 1e-12);
  EXPECT_NE(error_of<InvalidArgument>([&] {
              compute_average_loss(torch::ones({2}), 0);
            }).find("global_batch_size must be > 0"),
            std::string::npos);
}

TEST(TrainerTest, ErrorsNameTheProblem) {
  DefaultStrategy strategy;
  ReplicatedModel model = strategy.make_model(mlp_factory());
  torch::optim::SGD sgd(model.parameters(), 0.1);
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy());
  EXPECT_NE(error_of<InvalidArgument>([&] {
              trainer.fit(classification_data(8), quiet(1));
            }).find("batch the dataset with the global batch size"),
            std::string::npos);
  auto three = Dataset::from_tensor_slices(
                   {torch::zeros({8, 4}), torch::zeros({8}, torch::kLong), torch::zeros({8})})
                   .batch(4);
  EXPECT_NE(
      error_of<InvalidArgument>([&] { trainer.fit(three, quiet(1)); }).find("{input, target}"),
      std::string::npos);
  EXPECT_NE(
      error_of<InvalidArgument>([&] { trainer.fit(training_data(), quiet(0)); }).find("epochs"),
      std::string::npos);

  EngineGroup group(2);
  group.run([&](int, Engine& engine) {
    MultiWorkerMirroredStrategy mw(engine);
    ReplicatedModel m = mw.make_model(mlp_factory());
    torch::optim::SGD s(m.parameters(), 0.1);
    Trainer t(mw, m, s, losses::sparse_categorical_crossentropy());
    std::string e =
        error_of<InvalidArgument>([&] { t.fit(classification_data(33).batch(33), quiet(1)); });
    EXPECT_NE(e.find("33"), std::string::npos) << e;
  });
}

// Throws from a callback at a chosen global step: a crash in the middle of an epoch.
struct CrashAt : Callback {
  explicit CrashAt(int64_t step) : step(step) {}
  void on_train_batch_end(TrainContext& ctx, const Logs&) override {
    if (ctx.global_step == step) throw std::runtime_error("crash");
  }
  int64_t step;
};

TEST(CallbackTest, BackupAndRestoreResumesAtTheSavedStepWithIdenticalResults) {
  BackupAndRestoreOptions every3;
  every3.save_freq_steps = 3;
  const std::string clean_dir = temp_dir("clean"), crash_dir = temp_dir("crash");
  DefaultStrategy strategy;

  FitOptions clean = quiet(3);
  clean.callbacks = {backup_and_restore(clean_dir, every3)};
  FitRun reference = fit_with(strategy, clean, 0.9);
  EXPECT_FALSE(std::filesystem::exists(clean_dir)) << "the backup is deleted after success";

  FitOptions crashing = quiet(3);
  crashing.callbacks = {backup_and_restore(crash_dir, every3), std::make_shared<CrashAt>(11)};
  EXPECT_THROW(fit_with(strategy, crashing, 0.9), std::runtime_error);
  EXPECT_TRUE(std::filesystem::exists(crash_dir + "/backup-9"));

  FitOptions resumed = quiet(3);
  resumed.callbacks = {backup_and_restore(crash_dir, every3)};
  testing::internal::CaptureStdout();
  FitRun after = fit_with(strategy, resumed, 0.9);
  std::string out = testing::internal::GetCapturedStdout();
  // Global step 9 = epoch 1 (8 steps per epoch), step 1.
  EXPECT_NE(out.find("BackupAndRestore: resuming at epoch 1 step 1"), std::string::npos) << out;
  EXPECT_EQ(after.history.epochs.size(), 2u) << "epochs 1 and 2 run after the resume";
  EXPECT_TRUE(torch::equal(after.params, reference.params))
      << "model, optimizer and data position restored exactly";
  EXPECT_FALSE(std::filesystem::exists(crash_dir));
}

// The newest backup damaged on disk after the crash: the resume skips it (with the
// checkpoint manager's warning) and starts from the backup before, still exactly.
TEST(CallbackTest, BackupAndRestoreFallsBackToTheBackupBeforeADamagedOne) {
  BackupAndRestoreOptions every3;
  every3.save_freq_steps = 3;
  const std::string clean_dir = temp_dir("clean2"), crash_dir = temp_dir("crash2");
  DefaultStrategy strategy;
  FitOptions clean = quiet(3);
  clean.callbacks = {backup_and_restore(clean_dir, every3)};
  FitRun reference = fit_with(strategy, clean, 0.9);

  FitOptions crashing = quiet(3);
  crashing.callbacks = {backup_and_restore(crash_dir, every3), std::make_shared<CrashAt>(11)};
  EXPECT_THROW(fit_with(strategy, crashing, 0.9), std::runtime_error);
  // Saved at global steps 3, 6, 8 (epoch end) and 9; the newest two kept.
  ASSERT_TRUE(std::filesystem::exists(crash_dir + "/backup-8")) << "two backups kept";
  ASSERT_TRUE(std::filesystem::exists(crash_dir + "/backup-9"));
  EXPECT_FALSE(std::filesystem::exists(crash_dir + "/backup-6"));
  {
    std::fstream model(crash_dir + "/backup-9/model", std::ios::in | std::ios::out);
    ASSERT_TRUE(model.good());
    model.seekp(10);
    model.put('\x7f');
  }

  FitOptions resumed = quiet(3);
  resumed.callbacks = {backup_and_restore(crash_dir, every3)};
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  FitRun after = fit_with(strategy, resumed, 0.9);
  std::string out = testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("skipping checkpoint of step 9"), std::string::npos) << err;
  // Global step 8 = the end of epoch 0.
  EXPECT_NE(out.find("BackupAndRestore: resuming at epoch 1 step 0"), std::string::npos) << out;
  EXPECT_TRUE(torch::equal(after.params, reference.params));
}

TEST(CallbackTest, BackupAndRestoreRefusesKeepingNoBackup) {
  BackupAndRestoreOptions none;
  none.max_to_keep = 0;
  try {
    backup_and_restore("never-created", none);
    ADD_FAILURE() << "max_to_keep 0 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("max_to_keep must be >= 1, got 0"), std::string::npos);
  }
}

TEST(CallbackTest, TensorBoardCsvCheckpointsAndSideEvaluator) {
  const std::string dir = temp_dir("logs");
  DefaultStrategy strategy;
  ReplicatedModel model = strategy.make_model(mlp_factory());
  torch::optim::SGD sgd(model.parameters(), 0.5);
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy(),
                  {metrics::sparse_categorical_accuracy()});
  FitOptions o = quiet(2);
  o.validation_data = classification_data(64).batch(kGlobalBatch);
  ModelCheckpointOptions ck;
  ck.max_to_keep = 1;
  o.callbacks = {tensorboard(dir + "/tb", 4), csv_logger(dir + "/log.csv"),
                 model_checkpoint(dir + "/ckpt", ck)};
  History h = trainer.fit(training_data(), o);

  auto events_in = [](const std::string& d) {
    for (auto& e : std::filesystem::directory_iterator(d)) {
      if (e.path().filename().string().find("tfevents") != std::string::npos)
        return read_scalars(e.path());
    }
    return std::vector<ScalarEvent>{};
  };
  int batch_losses = 0;
  std::vector<float> epoch_losses;
  for (const auto& e : events_in(dir + "/tb/train")) {
    if (e.tag == "batch_loss") ++batch_losses;
    if (e.tag == "epoch_loss") epoch_losses.push_back(e.value);
  }
  EXPECT_EQ(batch_losses, 4);  // 16 steps, every 4th
  ASSERT_EQ(epoch_losses.size(), 2u);
  EXPECT_FLOAT_EQ(epoch_losses[1], static_cast<float>(h.get("loss")[1]));
  int val_epochs = 0;
  for (const auto& e : events_in(dir + "/tb/validation")) val_epochs += e.tag == "epoch_accuracy";
  EXPECT_EQ(val_epochs, 2);

  std::ifstream csv(dir + "/log.csv");
  std::string header, row1, row2;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  EXPECT_EQ(header, "epoch,accuracy,loss,val_accuracy,val_loss");
  EXPECT_EQ(row2.substr(0, 2), "1,");

  CheckpointManager checkpoints(dir + "/ckpt");
  ASSERT_EQ(checkpoints.list().size(), 1u) << "max_to_keep 1";
  EXPECT_EQ(checkpoints.latest()->step, 16);

  // The side evaluator loads the newest checkpoint into a fresh model and evaluates it.
  ReplicatedModel fresh = strategy.make_model(mlp_factory(0.7));
  torch::optim::SGD unused(fresh.parameters(), 0.1);
  Trainer evaluator(strategy, fresh, unused, losses::sparse_categorical_crossentropy(),
                    {metrics::sparse_categorical_accuracy()});
  SideEvaluatorOptions so;
  so.checkpoint_dir = dir + "/ckpt";
  so.log_dir = dir + "/tb";
  so.idle_timeout = std::chrono::milliseconds(500);
  so.last_step = 16;
  auto results = run_side_evaluator(evaluator, fresh, *o.validation_data, so);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].first, 16);
  EXPECT_NEAR(results[0].second.at("loss"), h.epochs.back().at("val_loss"), 1e-6);
  bool logged = false;
  for (const auto& e : events_in(dir + "/tb/eval"))
    logged |= e.tag == "eval_accuracy" && e.step == 16;
  EXPECT_TRUE(logged);
  std::filesystem::remove_all(dir);
}

// Records the learning rate at every step.
struct LrRecorder : Callback {
  void on_train_batch_begin(TrainContext&) override {}
  void on_train_batch_end(TrainContext& ctx, const Logs&) override {
    lrs.push_back(ctx.learning_rate());
  }
  std::vector<double> lrs;
};

TEST(CallbackTest, LearningRateScheduleWarmupAndEarlyStopping) {
  MirroredStrategy strategy(2);
  ReplicatedModel model = strategy.make_model(mlp_factory());
  torch::optim::SGD sgd(model.parameters(), 0.4);
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy());

  auto recorder = std::make_shared<LrRecorder>();
  FitOptions o = quiet(3);
  o.callbacks = {learning_rate_warmup(0.4, 1.0), recorder};
  trainer.fit(training_data(), o);
  ASSERT_EQ(recorder->lrs.size(), 24u);
  EXPECT_NEAR(recorder->lrs[0], 0.2, 1e-12);                    // 0.4 / 2 replicas
  EXPECT_NEAR(recorder->lrs[4], 0.2 + 0.2 * 4.0 / 8.0, 1e-12);  // linear ramp over 8 steps
  EXPECT_NEAR(recorder->lrs[8], 0.4, 1e-12);
  EXPECT_NEAR(recorder->lrs[23], 0.4, 1e-12);

  o.callbacks = {
      learning_rate_scheduler([](int epoch, double lr) { return epoch == 0 ? 0.4 : lr / 2; })};
  trainer.fit(training_data(), o);
  EXPECT_NEAR(sgd.param_groups()[0].options().get_lr(), 0.1, 1e-12);

  // An improvement must beat min_delta: with a huge one, only the first epoch counts, and
  // patience 1 stops the second (Keras: wait >= patience).
  EarlyStoppingOptions es;
  es.monitor = "loss";
  es.mode = "min";
  es.min_delta = 10.0;
  es.patience = 1;
  FitOptions ten = quiet(10);
  ten.callbacks = {early_stopping(es)};
  EXPECT_EQ(trainer.fit(training_data(), ten).epochs.size(), 2u);
  es.patience = 3;
  ten.callbacks = {early_stopping(es)};
  EXPECT_EQ(trainer.fit(training_data(), ten).epochs.size(), 4u);
  es.mode = "sideways";
  EXPECT_THROW(early_stopping(es), InvalidArgument);
}

TEST(TrainerTest, EvaluateAndPredict) {
  DefaultStrategy strategy;
  ReplicatedModel model = strategy.make_model(mlp_factory());
  torch::optim::SGD sgd(model.parameters(), 0.1);
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy(),
                  {metrics::sparse_categorical_accuracy()});
  Logs logs = trainer.evaluate(classification_data(64).batch(10));
  auto x = torch_testing::inputs(0, 64);
  auto y = torch_testing::labels(0, 64);
  auto out = model.primary().forward(x);
  EXPECT_NEAR(logs.at("loss"), torch::nn::functional::cross_entropy(out, y).item<double>(), 1e-6);
  EXPECT_NEAR(logs.at("accuracy"), out.argmax(1).eq(y).to(torch::kDouble).mean().item<double>(),
              1e-12);
  at::Tensor predicted = trainer.predict(classification_data(64).batch(10));
  EXPECT_TRUE(torch::allclose(predicted, out.detach(), 1e-6, 1e-6));
}

}  // namespace
}  // namespace chorus
