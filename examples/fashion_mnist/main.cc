// Fashion-MNIST, data-parallel: the multi-worker tutorial's model (Conv2D 32 3x3 relu ->
// Flatten -> Dense 128 relu -> Dense 10, 2.77 M parameters) trained with SGD through
// chorus::DistributedOptimizer. Per-worker batch 64 (global batch = 64 x workers), the
// learning rate scaled by the number of workers unless --no-scale-lr. --adasum combines
// the workers' steps with Adasum (Horovod's delta optimizer, docs/torch.md) instead of
// averaging gradients; the learning rate is then not scaled, as in Horovod's examples.
//
//   chorusrun -np 2 build/examples/fashion_mnist/fashion_mnist --epochs 3
//
// Prints per epoch (rank 0): loss, train accuracy, test accuracy, samples/s; and a
// progress line every 10% of an epoch.
//
// --lockstep-only is a benchmark baseline (bench/torch_ddp/compare_training.sh): each
// worker steps on its own gradients and the workers only meet at a barrier once per step,
// exchanging no data: what a synchronous step costs on this machine before any averaging.
// Everything else stays as with averaging, the gradients' zeroing (to none) included.
//
// --balance splits each step's global batch among the workers by how fast each computed
// its last share (chorus::BatchBalancer), instead of --batch rows each: the same samples
// and the same averaged gradient as one process on the global batch.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "../common/fashion_mnist.h"
#include "../common/flags.h"
#include "chorus/report.h"
#include "chorus/torch.h"

namespace {

struct Args {
  int epochs = 3;
  int64_t batch = 64;  // per worker
  double lr = 0.01;    // for one worker; x workers unless no_scale_lr
  double momentum = 0.0;
  bool no_scale_lr = false;
  int threads = 1;           // intra-op threads per worker
  int64_t max_steps = 0;     // per epoch; 0 = the whole epoch
  int64_t warmup_steps = 0;  // steps of epoch 1 left out of samples/s
  bool fp16 = false;
  // DistributedOptimizerOptions::bucket_bytes; 0: every gradient reduced where autograd
  // put it (docs/torch.md), for comparisons.
  int64_t bucket_bytes = chorus::DistributedOptimizerOptions{}.bucket_bytes;
  bool skip_test = false;
  bool lockstep_only = false;  // no averaging, a barrier per step (a baseline, see above)
  bool balance = false;        // shares of the global batch by speed (see above)
  bool adasum = false;         // ReduceOp::kAdasum: the delta optimizer
  std::string data = "/usr/share/datasets/fashion-mnist";
};

Args parse(int argc, char** argv) {
  Args a;
  chorus::examples::Flags flags(
      "fashion_mnist",
      "[--epochs N] [--batch B] [--lr LR] [--momentum M] [--no-scale-lr] [--threads T]\n"
      "  [--max-steps S] [--warmup-steps W] [--fp16] [--bucket-bytes N] [--skip-test]\n"
      "  [--data DIR] [--lockstep-only] [--balance] [--adasum]");
  flags.add("--epochs", a.epochs)
      .add("--batch", a.batch)
      .add("--lr", a.lr)
      .add("--momentum", a.momentum)
      .add_switch("--no-scale-lr", a.no_scale_lr)
      .add("--threads", a.threads)
      .add("--max-steps", a.max_steps)
      .add("--warmup-steps", a.warmup_steps)
      .add_switch("--fp16", a.fp16)
      .add("--bucket-bytes", a.bucket_bytes)
      .add_switch("--skip-test", a.skip_test)
      .add_switch("--lockstep-only", a.lockstep_only)
      .add_switch("--balance", a.balance)
      .add_switch("--adasum", a.adasum)
      .add("--data", a.data);
  flags.parse(argc, argv);
  if (a.epochs < 1 || a.batch < 1 || a.threads < 1 || a.lr <= 0 || a.bucket_bytes < 0) {
    flags.fail("(values)");
  }
  if (a.balance && a.lockstep_only) flags.fail("--balance with --lockstep-only");
  if (a.adasum && (a.balance || a.lockstep_only)) {
    flags.fail("--adasum with --balance or --lockstep-only");
  }
  return a;
}

using chorus::examples::FashionNet;
using chorus::examples::Split;

// This rank's share of the test set (every size-th sample): the ranks' correct counts add
// up to the accuracy on all of it.
double test_accuracy(FashionNet& model, const Split& test) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t n = test.images.size(0);
  auto idx = torch::arange(chorus::rank(), n, chorus::size(), torch::kInt64);
  int64_t correct = 0;
  for (int64_t b = 0; b < idx.size(0); b += 1000) {
    auto sel = idx.slice(0, b, std::min<int64_t>(b + 1000, idx.size(0)));
    auto pred = model->forward(test.images.index_select(0, sel)).argmax(1);
    correct += pred.eq(test.labels.index_select(0, sel)).sum().item<int64_t>();
  }
  model->train();
  return chorus::metric_sum(static_cast<double>(correct), "metric/test_correct") /
         static_cast<double>(n);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  chorus::examples::set_threads(args.threads);
  chorus::init();
  const int rank = chorus::rank(), workers = chorus::size();
  const bool chief = rank == 0;

  const Split train = chorus::examples::load_fashion_mnist(args.data, "train");
  const Split test = chorus::examples::load_fashion_mnist(args.data, "t10k");

  torch::manual_seed(1234);
  FashionNet model;
  chorus::broadcast_parameters(*model, 0);
  const double lr = args.no_scale_lr || args.adasum ? args.lr : args.lr * workers;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(lr).momentum(args.momentum));
  chorus::DistributedOptimizerOptions opt_options;
  opt_options.fp16_compression = args.fp16;
  opt_options.bucket_bytes = static_cast<size_t>(args.bucket_bytes);
  if (args.adasum) opt_options.op = chorus::ReduceOp::kAdasum;
  std::unique_ptr<chorus::DistributedOptimizer> averaging;
  if (!args.lockstep_only) {
    averaging =
        std::make_unique<chorus::DistributedOptimizer>(sgd, model->named_parameters(), opt_options);
  }

  // Balanced: every rank walks the same order, a global batch per step, and takes its share.
  const int64_t global_batch = args.batch * workers;
  chorus::DistributedSampler sampler(train.images.size(0), args.balance ? 1 : workers,
                                     args.balance ? 0 : rank);
  int64_t steps = sampler.num_batches(args.balance ? global_batch : args.batch,
                                      /*drop_last_batch=*/false);
  std::unique_ptr<chorus::BatchBalancer> balancer;
  if (args.balance) balancer = std::make_unique<chorus::BatchBalancer>();
  if (args.max_steps > 0) steps = std::min(steps, args.max_steps);
  if (chief) {
    std::printf(
        "fashion_mnist: %d worker(s) on %d host(s), batch %lld per worker (global %lld), lr %g, "
        "%lld steps/epoch, %d thread(s)/worker%s%s%s%s\n",
        workers, chorus::cross_size(), static_cast<long long>(args.batch),
        static_cast<long long>(args.batch * workers), lr, static_cast<long long>(steps),
        args.threads, args.fp16 ? ", fp16 gradients" : "",
        args.lockstep_only ? ", lockstep only (no averaging)" : "",
        args.balance ? ", shares balanced by speed" : "",
        args.adasum ? ", steps combined with Adasum" : "");
    std::fflush(stdout);
  }

  // Under chorusrun --dashboard: this rank's steps, samples and time breakdown, its loss,
  // and the engine's counters go to the launcher's page (docs/dashboard.md).
  const bool reporting = chorus::report::enabled();
  auto engine_watch = reporting ? chorus::report::watch_engine(chorus::default_engine()) : nullptr;
  uint64_t gradient_bytes = 0, gradient_tensors = 0;
  for (const auto& p : model->parameters()) {
    gradient_bytes += p.numel() * p.element_size();
    ++gradient_tensors;
  }
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };

  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> order = sampler.indices();
    auto order_t = torch::from_blob(const_cast<int64_t*>(order.data()),
                                    {static_cast<int64_t>(order.size())}, torch::kInt64);
    double loss_sum = 0, correct = 0, seen = 0;
    auto start = std::chrono::steady_clock::now();
    double timed_samples = 0;
    for (int64_t step = 0; step < steps; ++step) {
      if (epoch == 1 && step == args.warmup_steps && step > 0) {
        start = std::chrono::steady_clock::now();
        timed_samples = 0;
      }
      const Clock::time_point t0 = reporting ? Clock::now() : Clock::time_point{};
      const int64_t rows = args.balance ? global_batch : args.batch;
      const int64_t first = step * rows, last = std::min<int64_t>(first + rows, order_t.size(0));
      const chorus::BatchShare share =
          balancer ? balancer->next(last - first) : chorus::BatchShare{0, last - first, 1.0};
      auto sel = order_t.slice(0, first + share.begin, first + share.end);
      auto x = train.images.index_select(0, sel);
      auto y = train.labels.index_select(0, sel);
      const Clock::time_point t1 = reporting ? Clock::now() : t0;
      if (averaging) {
        averaging->zero_grad();
      } else {  // set to none, as DistributedOptimizer::zero_grad() does
        for (auto& p : model->parameters()) p.mutable_grad().reset();
      }
      const Clock::time_point computing = balancer ? Clock::now() : t0;
      auto logits = model->forward(x);
      auto loss = torch::nn::functional::cross_entropy(logits, y);
      (share.loss_scale == 1.0 ? loss : loss * share.loss_scale).backward();
      const Clock::time_point t2 = reporting || balancer ? Clock::now() : t0;
      if (balancer) balancer->record(since(computing, t2));
      if (averaging) {
        averaging->step();  // waits for the gradients' allreduces
      } else {
        sgd.step();
        if (workers > 1) chorus::barrier("lockstep");
      }
      const Clock::time_point t3 = reporting ? Clock::now() : t0;
      const double b = static_cast<double>(sel.size(0));
      loss_sum += loss.item<double>() * b;
      correct += static_cast<double>(logits.argmax(1).eq(y).sum().item<int64_t>());
      seen += b;
      if (reporting) {
        const Clock::time_point t4 = Clock::now();
        const bool averaged = averaging && workers > 1;
        chorus::report::step({sel.size(0), since(t1, t2) + since(t3, t4), since(t2, t3),
                              since(t0, t1), averaged ? gradient_bytes : 0,
                              averaged ? gradient_tensors : 0});
        chorus::report::scalar("loss", loss_sum / seen);
        chorus::report::scalar("accuracy", correct / seen);
      }
      timed_samples += balancer ? static_cast<double>(last - first) : b * workers;
      if (chief && steps >= 10 && (step + 1) % (steps / 10) == 0 && step + 1 < steps) {
        std::printf("  epoch %d [%3lld%%] step %lld/%lld loss %.4f\n", epoch,
                    static_cast<long long>(100 * (step + 1) / steps),
                    static_cast<long long>(step + 1), static_cast<long long>(steps),
                    loss_sum / seen);
        std::fflush(stdout);
      }
    }
    const double train_seconds = seconds_since(start);
    const double rate = chorus::metric_average(timed_samples / train_seconds, "metric/rate");
    const double total = chorus::metric_sum(seen, "metric/seen");
    const double mean_loss = chorus::metric_sum(loss_sum, "metric/loss") / total;
    const double train_acc = chorus::metric_sum(correct, "metric/correct") / total;
    const double test_acc = args.skip_test ? -1 : test_accuracy(model, test);
    if (chief) {
      std::printf("epoch %d: loss %.4f  train accuracy %.4f  test accuracy %s  %.0f samples/s\n",
                  epoch, mean_loss, train_acc,
                  args.skip_test ? "-" : std::to_string(test_acc).substr(0, 6).c_str(), rate);
      std::fflush(stdout);
    }
  }
  engine_watch.reset();  // before the engine goes
  chorus::shutdown();
  return 0;
}
