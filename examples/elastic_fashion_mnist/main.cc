// Fashion-MNIST, elastic: workers may be killed or added while it trains, and the others
// go on without restarting (chorus/elastic.h, docs/elastic.md).
//
//   chorusrun --min-np 2 --max-np 4 -H localhost:3 elastic_fashion_mnist --epochs 2
//
// A small MLP (784 -> 128 -> 10) trained with SGD; the learning rate is scaled by the
// number of workers and rescaled at every resize. Every step is committed. With --log-dir
// each worker appends what it did to DIR/<worker id>.log (DIR/r<rank>.log outside an elastic
// job), a line per event (the elastic tests and bench/elastic read them):
//   start <pid>                          the process began
//   reset <size> <rank>                  a new world formed
//   step <epoch> <begin> <end> <size> <rank> <params sum> <unix time>   a committed step:
//                                        positions [begin, end) of the epoch's permutation
//   accuracy <fraction>                  test accuracy at the end (rank 0)
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
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
  std::string checkpoint;  // a file: rank 0 writes it, everyone starts from it
  int64_t checkpoint_every = 100;
  std::string die_in_reset;  // tests: this worker SIGKILLs itself in its first reset
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
    const char* rank = std::getenv("CHORUS_RANK");
    std::string name = id ? id : "r" + std::string(rank ? rank : "0");
    file_ = std::fopen((dir + "/" + name + ".log").c_str(), "a");
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

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// --checkpoint FILE: the model, the optimizer and the sampler's place in one file, written
// whole and renamed into place, so a job restarted by chorusrun --max-restarts resumes
// from the last one (bench/elastic compares that with an elastic recovery).
void save_checkpoint(const std::string& path, Mlp& model, torch::optim::Optimizer& optimizer,
                     const chorus::elastic::ElasticSampler& sampler) {
  torch::serialize::OutputArchive root, m, o;
  model->save(m);
  optimizer.save(o);
  root.write("model", m);
  root.write("optimizer", o);
  root.write("progress", torch::tensor({sampler.progress().epoch, sampler.progress().processed}));
  root.save_to(path + ".tmp");
  std::rename((path + ".tmp").c_str(), path.c_str());
}

void load_checkpoint(const std::string& path, Mlp& model, torch::optim::Optimizer& optimizer,
                     chorus::elastic::ElasticSampler& sampler) {
  if (path.empty() || ::access(path.c_str(), R_OK) != 0) return;
  torch::serialize::InputArchive root, m, o;
  root.load_from(path);
  root.read("model", m);
  root.read("optimizer", o);
  model->load(m);
  optimizer.load(o);
  torch::Tensor progress;
  root.read("progress", progress);
  sampler.set_progress({progress[0].item<int64_t>(), progress[1].item<int64_t>()});
}

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
                                "[--step-ms MS] [--data DIR] [--log-dir DIR] [--checkpoint FILE] "
                                "[--checkpoint-every STEPS]");
  flags.add("--epochs", a.epochs)
      .add("--batch", a.batch)
      .add("--lr", a.lr)
      .add("--train-limit", a.train_limit)
      .add("--step-ms", a.step_ms)
      .add("--data", a.data)
      .add("--log-dir", a.log_dir)
      .add("--checkpoint", a.checkpoint)
      .add("--checkpoint-every", a.checkpoint_every)
      .add("--die-in-reset", a.die_in_reset);
  flags.parse(argc, argv);
  if (a.epochs < 1 || a.batch < 1 || a.lr <= 0 || a.checkpoint_every < 1) flags.fail("(values)");

  chorus::examples::set_threads(1);
  EventLog log(a.log_dir);
  log.say("start %d", static_cast<int>(::getpid()));
  const auto train = chorus::examples::load_fashion_mnist(a.data, "train", a.train_limit);
  const auto test = chorus::examples::load_fashion_mnist(a.data, "t10k");

  chorus::init();
  torch::manual_seed(1);
  Mlp model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(a.lr).momentum(0.9));
  chorus::elastic::ElasticSampler sampler(train.images.size(0), a.batch, {true, 42, false});
  load_checkpoint(a.checkpoint, model, sgd, sampler);
  chorus::elastic::TorchState state(*model, sgd);
  state.set_sampler(&sampler);
  auto scale_lr = [&] {
    for (auto& group : sgd.param_groups()) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(a.lr * chorus::size());
    }
    log.say("reset %d %d", chorus::size(), chorus::rank());
  };
  scale_lr();
  state.register_reset_callback(scale_lr);
  // Tests: a failure while the others re-form and sync (the callbacks run just before it).
  const char* id = std::getenv("CHORUS_ELASTIC_ID");
  if (id && a.die_in_reset == id) state.register_reset_callback([] { ::raise(SIGKILL); });

  auto train_loop = [&](chorus::elastic::State&) {
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
        log.say("step %lld %lld %lld %d %d %.9g %.6f", static_cast<long long>(epoch),
                static_cast<long long>(begin), static_cast<long long>(end), size, rank,
                params_sum(model), unix_time());
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
      if (!a.checkpoint.empty() && rank == 0 && state.commits() % a.checkpoint_every == 0) {
        save_checkpoint(a.checkpoint, model, sgd, sampler);
      }
    }
  };
  try {
    chorus::elastic::run(state, train_loop);
  } catch (const chorus::Error& e) {
    // Outside an elastic job a lost worker ends the attempt (chorusrun --max-restarts).
    std::fprintf(stderr, "training failed: %s\n", e.what());
    return 1;
  }
  const double acc = accuracy(model, test);
  if (chorus::rank() == 0) {
    log.say("accuracy %.4f", acc);
    std::printf("test accuracy %.4f after %d epoch(s) at %d worker(s)\n", acc, a.epochs,
                chorus::size());
  }
  chorus::shutdown();
  return 0;
}
