// Keras-style fit of the Fashion-MNIST CNN with MultiWorkerMirroredStrategy — the
// multi-worker tutorial in C++. Workers started by hand with TF_CONFIG, as the tutorial
// does (no launcher):
//
//   TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
//               "task": {"type": "worker", "index": 0}}' keras_fashion_mnist &
//   TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
//               "task": {"type": "worker", "index": 1}}' keras_fashion_mnist
//
// or with the launcher: chorusrun -np 2 keras_fashion_mnist. The program is the same on
// one worker: only the strategy and the global batch (64 x replicas) say "distributed".
//
// With --strategy ps it trains under ParameterServerStrategy instead (chief, workers and
// ps tasks from TF_CONFIG, or all started by `chorusrun --ps 2 -np 2 keras_fashion_mnist
// --strategy ps`), with --ps-mode async|sync|ssp (--staleness S for ssp).
//
// With --elastic (under chorusrun --min-np/--max-np) fit rides out workers leaving and
// joining (docs/elastic.md); give --global-batch, a multiple of every worker count the
// job may have: each worker's share of it changes with the count.
//
// With --side-eval DIR the process is a side evaluator instead: it evaluates every new
// checkpoint that a training run with --checkpoint-dir DIR commits, beside the training.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "../common/fashion_mnist.h"
#include "../common/flags.h"
#include "chorus/train.h"

namespace {

struct Args {
  int epochs = 3;
  int64_t batch = 64;        // per replica
  int64_t global_batch = 0;  // 0: batch x replicas
  bool elastic = false;
  double lr = 0.01;  // for one replica; x replicas
  double momentum = 0.9;
  int64_t steps_per_epoch = -1;  // -1: whole epochs
  int64_t train_samples = 0;     // 0: all 60000
  int64_t test_samples = 0;      // 0: all 10000
  std::string backup_dir, checkpoint_dir, logdir, csv;
  std::string side_eval;         // a checkpoint directory to watch
  int64_t last_step = -1;        // the side evaluator stops after this checkpoint step
  int64_t save_freq = 0;         // BackupAndRestore / ModelCheckpoint every N steps (0: epoch)
  int64_t checkpoint_freq = -1;  // ModelCheckpoint alone (-1: as save_freq)
  int threads = 1;
  int verbose = 1;
  std::string strategy = "mwms";  // or "ps"
  std::string ps_mode = "async";  // async | sync | ssp
  int staleness = 2;
  // The cluster as TF1 flags instead of TF_CONFIG (--job_name chief|worker|ps).
  std::string ps_hosts, worker_hosts, chief_host, job_name;
  int task_index = 0;
  std::string data = "/usr/share/datasets/fashion-mnist";
};

Args parse(int argc, char** argv) {
  Args a;
  chorus::examples::Flags flags(
      "keras_fashion_mnist",
      "[--epochs N] [--batch B] [--lr LR] [--momentum M]\n"
      "  [--steps-per-epoch S] [--train-samples N] [--test-samples N] [--backup-dir D]\n"
      "  [--checkpoint-dir D] [--logdir D] [--csv FILE] [--save-freq STEPS]\n"
      "  [--checkpoint-freq STEPS (ModelCheckpoint alone; 0: epoch ends)]\n"
      "  [--threads T] [--verbose 0|1|2] [--data DIR] [--elastic --global-batch G]\n"
      "  [--strategy mwms|ps [--ps-mode async|sync|ssp] [--staleness S]\n"
      "   [--ps_hosts H:P,.. --worker_hosts H:P,.. --chief_host H:P --job_name J --task_index I]]\n"
      "  [--side-eval CHECKPOINT_DIR [--last-step S]]");
  flags.add("--epochs", a.epochs)
      .add("--batch", a.batch)
      .add("--lr", a.lr)
      .add("--momentum", a.momentum)
      .add("--steps-per-epoch", a.steps_per_epoch)
      .add("--train-samples", a.train_samples)
      .add("--test-samples", a.test_samples)
      .add("--backup-dir", a.backup_dir)
      .add("--checkpoint-dir", a.checkpoint_dir)
      .add("--logdir", a.logdir)
      .add("--csv", a.csv)
      .add("--save-freq", a.save_freq)
      .add("--checkpoint-freq", a.checkpoint_freq)
      .add("--threads", a.threads)
      .add("--verbose", a.verbose)
      .add("--data", a.data)
      .add("--side-eval", a.side_eval)
      .add("--last-step", a.last_step)
      .add("--strategy", a.strategy)
      .add("--ps-mode", a.ps_mode)
      .add("--staleness", a.staleness)
      .add("--ps_hosts", a.ps_hosts)
      .add("--worker_hosts", a.worker_hosts)
      .add("--chief_host", a.chief_host)
      .add("--job_name", a.job_name)
      .add("--task_index", a.task_index)
      .add("--global-batch", a.global_batch)
      .add_switch("--elastic", a.elastic);
  flags.parse(argc, argv);
  if (a.epochs < 1 || a.batch < 1 || a.threads < 1 || a.lr <= 0) flags.fail("(values)");
  if (a.strategy != "mwms" && a.strategy != "ps") flags.fail("--strategy");
  if (a.ps_mode != "async" && a.ps_mode != "sync" && a.ps_mode != "ssp") flags.fail("--ps-mode");
  return a;
}

// The side evaluator: one replica, no job to join; evaluates checkpoints as they appear.
int side_evaluator(const Args& args) {
  using namespace chorus;
  DefaultStrategy strategy;
  auto test = examples::load_fashion_mnist(args.data, "t10k", args.test_samples);
  Dataset test_data = Dataset::from_tensor_slices({test.images, test.labels}).batch(1000);
  ReplicatedModel model =
      strategy.make_model<examples::FashionNet>([] { return examples::FashionNet(); });
  torch::optim::SGD unused(model.parameters(), 0.1);
  Trainer trainer(strategy, model, unused, losses::sparse_categorical_crossentropy(),
                  {metrics::sparse_categorical_accuracy()});
  SideEvaluatorOptions options;
  options.checkpoint_dir = args.side_eval;
  options.log_dir = args.logdir.empty() ? args.side_eval : args.logdir;
  options.last_step = args.last_step;
  options.idle_timeout = std::chrono::minutes(2);
  auto results = run_side_evaluator(trainer, model, test_data, options);
  for (const auto& [step, logs] : results) {
    std::printf("side evaluator: checkpoint step %lld val_loss %.4f val_accuracy %.4f\n",
                static_cast<long long>(step), logs.at("loss"), logs.at("accuracy"));
  }
  return results.empty() ? 1 : 0;
}

std::unique_ptr<chorus::Strategy> make_strategy(const Args& args) {
  using namespace chorus;
  if (args.strategy == "mwms") return std::make_unique<MultiWorkerMirroredStrategy>();
  ParameterServerStrategy::Options o;
  o.mode = args.ps_mode == "sync"  ? ps::UpdateMode::kSync
           : args.ps_mode == "ssp" ? ps::UpdateMode::kBoundedStaleness
                                   : ps::UpdateMode::kAsync;
  o.max_staleness = args.staleness;
  if (args.job_name.empty()) return std::make_unique<ParameterServerStrategy>(o);  // TF_CONFIG
  ps::ClusterSpec cluster = ps::ClusterSpec::from_flags(
      args.ps_hosts, args.worker_hosts, args.chief_host, args.job_name, args.task_index);
  // A ps task serves and exits inside the constructor.
  return std::make_unique<ParameterServerStrategy>(cluster, Secret{}, o);
}

int train(const Args& args) {
  using namespace chorus;

  std::unique_ptr<Strategy> owned = make_strategy(args);
  Strategy& strategy = *owned;
  const int replicas = strategy.num_replicas_in_sync();
  const int64_t global_batch = args.global_batch > 0 ? args.global_batch : args.batch * replicas;
  // Linear scaling with the global batch (which an elastic job keeps as workers come and go).
  const double lr = args.lr * static_cast<double>(global_batch) / static_cast<double>(args.batch);
  std::printf("%s %d of %d: pid %d\n", strategy.is_chief() ? "chief" : "worker",
              strategy.worker_index(), strategy.num_workers(), getpid());
  std::fflush(stdout);

  auto train = examples::load_fashion_mnist(args.data, "train", args.train_samples);
  auto test = examples::load_fashion_mnist(args.data, "t10k", args.test_samples);
  Dataset train_data = Dataset::from_tensor_slices({train.images, train.labels})
                           .shuffle(train.images.size(0), /*seed=*/7)
                           .batch(global_batch);
  if (args.steps_per_epoch > 0) train_data = train_data.repeat();
  Dataset test_data = Dataset::from_tensor_slices({test.images, test.labels}).batch(global_batch);

  torch::manual_seed(1234);
  ReplicatedModel model =
      strategy.make_model<examples::FashionNet>([] { return examples::FashionNet(); });
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(lr).momentum(args.momentum));
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy(),
                  {metrics::sparse_categorical_accuracy()});

  FitOptions fit;
  fit.epochs = args.epochs;
  fit.steps_per_epoch = args.steps_per_epoch;
  fit.validation_data = test_data;
  fit.verbose = args.verbose;
  fit.elastic = args.elastic;
  if (!args.backup_dir.empty()) {
    BackupAndRestoreOptions o;
    o.save_freq_steps = args.save_freq;
    fit.callbacks.push_back(backup_and_restore(args.backup_dir, o));
  }
  if (!args.checkpoint_dir.empty()) {
    ModelCheckpointOptions o;
    o.save_freq_steps = args.checkpoint_freq >= 0 ? args.checkpoint_freq : args.save_freq;
    fit.callbacks.push_back(model_checkpoint(args.checkpoint_dir, o));
  }
  if (!args.logdir.empty()) fit.callbacks.push_back(tensorboard(args.logdir, 10));
  if (!args.csv.empty()) fit.callbacks.push_back(csv_logger(args.csv));

  if (strategy.is_chief()) {
    std::printf("keras_fashion_mnist: %s, %d replica(s), global batch %lld, lr %g\n",
                strategy.name().c_str(), replicas, static_cast<long long>(global_batch), lr);
    std::fflush(stdout);
  }
  History history = trainer.fit(train_data, fit);
  if (strategy.is_chief() && !history.epochs.empty()) {
    const Logs& last = history.epochs.back();
    std::printf("final: loss %.4f accuracy %.4f val_loss %.4f val_accuracy %.4f workers %d\n",
                last.at("loss"), last.at("accuracy"), last.at("val_loss"), last.at("val_accuracy"),
                strategy.num_workers());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  chorus::examples::set_threads(args.threads);
  if (!args.side_eval.empty()) return side_evaluator(args);
  try {
    return train(args);
  } catch (const std::exception& e) {  // the strategy's destructor has shut the cluster down
    std::fflush(stdout);
    std::fprintf(stderr, "keras_fashion_mnist: %s\n", e.what());
    return 1;
  }
}
