// Fashion-MNIST, elastic: workers may be killed or added while it trains, and the others
// go on without restarting (chorus/elastic.h, docs/elastic.md).
//
//   chorusrun --min-np 2 --max-np 4 -H localhost:3 elastic_fashion_mnist --epochs 2
//
// A small MLP (784 -> 128 -> 10) trained with SGD; the learning rate is scaled by the
// number of workers and rescaled at every resize. Every step is committed. With --log-dir
// each worker appends what it did to DIR/<worker id>.log, a line per event (the elastic
// tests read them):
//   start <pid>                          the process began
//   reset <size> <rank>                  a new world formed
//   step <epoch> <begin> <end> <size> <rank> <params sum>   a committed step: positions
//                                        [begin, end) of the epoch's permutation
//   accuracy <fraction>                  test accuracy at the end (rank 0)
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "../common/fashion_mnist.h"
#include "../common/flags.h"
#include "chorus/elastic.h"
#include "chorus/torch.h"
#include "chorus/torch/elastic_state.h"

namespace {

struct Args {
  int epochs = 1;
  int64_t batch = 32;
  double lr = 0.02;         // per worker: scaled by the number of workers
  int64_t train_limit = 0;  // 0: all 60000
  int64_t step_ms = 0;      // extra time per step (tests: to kill mid-epoch)
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string log_dir;
};

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

// One line per event, flushed at once: the worker may be SIGKILLed after any of them.
class EventLog {
 public:
  explicit EventLog(const std::string& dir) {
    if (dir.empty()) return;
    const char* id = std::getenv("CHORUS_ELASTIC_ID");
    file_ = std::fopen((dir + "/" + (id ? id : "solo") + ".log").c_str(), "a");
  }
  ~EventLog() {
    if (file_) std::fclose(file_);
  }
  template <typename... T>
  void say(const char* format, T... values) {
    if (!file_) return;
    std::fprintf(file_, format, values...);
    std::fputc('\n', file_);
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
};

double params_sum(Mlp& model) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (const auto& p : model->parameters()) sum += p.sum().item<double>();
  return sum;
}

double accuracy(Mlp& model, const chorus::examples::Split& test) {
  torch::NoGradGuard no_grad;
  auto predicted = model->forward(test.images).argmax(1);
  return predicted.eq(test.labels).to(torch::kFloat64).mean().item<double>();
}

// One step on this rank's part of the world's batch; a rank without samples (the epoch's
// last step, fewer samples than ranks) contributes zero gradients.
void train_step(Mlp& model, chorus::DistributedOptimizer& opt, const chorus::examples::Split& train,
                const std::vector<int64_t>& indices) {
  opt.zero_grad();
  if (indices.empty()) {
    (model->forward(train.images.narrow(0, 0, 1)).sum() * 0).backward();
  } else {
    auto idx = torch::tensor(indices, torch::kInt64);
    auto loss =
        torch::nll_loss(torch::log_softmax(model->forward(train.images.index_select(0, idx)), 1),
                        train.labels.index_select(0, idx));
    loss.backward();
  }
  opt.step();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  chorus::examples::Flags flags(argv[0],
                                "[--epochs E] [--batch B] [--lr LR] [--train-limit N] "
                                "[--step-ms MS] [--data DIR] [--log-dir DIR]");
  flags.add("--epochs", a.epochs)
      .add("--batch", a.batch)
      .add("--lr", a.lr)
      .add("--train-limit", a.train_limit)
      .add("--step-ms", a.step_ms)
      .add("--data", a.data)
      .add("--log-dir", a.log_dir);
  flags.parse(argc, argv);
  if (a.epochs < 1 || a.batch < 1 || a.lr <= 0) flags.fail("(values)");

  chorus::examples::set_threads(1);
  EventLog log(a.log_dir);
  log.say("start %d", static_cast<int>(::getpid()));
  const auto train = chorus::examples::load_fashion_mnist(a.data, "train", a.train_limit);
  const auto test = chorus::examples::load_fashion_mnist(a.data, "t10k");

  chorus::init();
  torch::manual_seed(1);
  Mlp model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(a.lr).momentum(0.9));
  chorus::elastic::TorchState state(*model, sgd);
  chorus::elastic::ElasticSampler sampler(train.images.size(0), a.batch, {true, 42, false});
  state.set_sampler(&sampler);
  auto scale_lr = [&] {
    for (auto& group : sgd.param_groups()) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(a.lr * chorus::size());
    }
    log.say("reset %d %d", chorus::size(), chorus::rank());
  };
  scale_lr();
  state.register_reset_callback(scale_lr);

  chorus::elastic::run(state, [&](chorus::elastic::State&) {
    // Wraps the optimizer on this world's engine: made anew at every (re)start.
    chorus::DistributedOptimizer opt(sgd, model->named_parameters());
    while (sampler.epoch() < a.epochs) {
      if (sampler.epoch_done()) {
        sampler.set_epoch(sampler.epoch() + 1);
        state.commit();
        continue;
      }
      const int size = chorus::size(), rank = chorus::rank();
      const int64_t begin = sampler.processed();
      train_step(model, opt, train, sampler.next_batch(rank, size));
      if (a.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.step_ms));
      sampler.record_step(size);
      auto logged = [&, epoch = sampler.epoch(), end = sampler.processed()] {
        log.say("step %lld %lld %lld %d %d %.9g", static_cast<long long>(epoch),
                static_cast<long long>(begin), static_cast<long long>(end), size, rank,
                params_sum(model));
      };
      // commit() saves before it asks about new workers, which may throw: the step is
      // committed either way.
      try {
        state.commit();
      } catch (...) {
        logged();
        throw;
      }
      logged();
    }
  });
  const double acc = accuracy(model, test);
  if (chorus::rank() == 0) {
    log.say("accuracy %.4f", acc);
    std::printf("test accuracy %.4f after %d epoch(s) at %d worker(s)\n", acc, a.epochs,
                chorus::size());
  }
  chorus::shutdown();
  return 0;
}
