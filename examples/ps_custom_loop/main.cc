// A custom training loop under ParameterServerStrategy (tf.distribute's "parameter server
// training with a custom training loop" tutorial in C++). Every task runs this program:
// ps tasks serve the variables (inside the strategy's constructor), workers serve the
// steps the chief schedules, and the chief schedules them, joins, and evaluates.
//
//   chorusrun --ps 1 -np 2 ps_custom_loop --steps 200
//
// A step is a function compiled into every task and scheduled by name: the worker pulls
// the parameters, runs it on its next batch, and apply_gradients() pushes the gradients
// to the ps tasks, where the optimizer runs.
#include <cstdio>
#include <string>

#include "../common/fashion_mnist.h"
#include "../common/flags.h"
#include "chorus/train.h"

int main(int argc, char** argv) {
  using namespace chorus;
  int64_t steps = 200, batch = 64, train_samples = 0, test_samples = 0;
  std::string mode = "async", data_dir = "/usr/share/datasets/fashion-mnist";
  examples::Flags flags("ps_custom_loop",
                        "[--steps N] [--batch B] [--mode async|sync|ssp] [--train-samples N] "
                        "[--test-samples N] [--data DIR]");
  flags.add("--steps", steps)
      .add("--batch", batch)
      .add("--mode", mode)
      .add("--train-samples", train_samples)
      .add("--test-samples", test_samples)
      .add("--data", data_dir)
      .parse(argc, argv);
  if (mode != "async" && mode != "sync" && mode != "ssp") flags.fail("--mode");
  if (steps < 1 || batch < 1) flags.fail("(values)");
  examples::set_threads(1);
  ParameterServerStrategy::Options options;
  options.mode = mode == "sync"  ? ps::UpdateMode::kSync
                 : mode == "ssp" ? ps::UpdateMode::kBoundedStaleness
                                 : ps::UpdateMode::kAsync;
  ParameterServerStrategy strategy(options);  // a ps task serves and exits here

  torch::manual_seed(1234);
  ReplicatedModel model =
      strategy.make_model<examples::FashionNet>([] { return examples::FashionNet(); });
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  GradientUpdater updater = strategy.make_updater(model, sgd);  // chief: creates the variables
  LossFn loss_fn = losses::sparse_categorical_crossentropy();

  if (!strategy.is_chief()) {
    auto train = examples::load_fashion_mnist(data_dir, "train", train_samples);
    DatasetIterator it = Dataset::from_tensor_slices({train.images, train.labels})
                             .shard(strategy.num_workers(), strategy.worker_index())
                             .shuffle(train.images.size(0), 7)
                             .repeat()
                             .batch(batch)
                             .iterate(0);
    strategy.define_step("train", [&](PsStepContext& ctx) {
      Example b = *it.next();
      torch::Tensor loss = loss_fn(ctx.model.primary().forward(b[0]), b[1]).mean();
      loss.backward();
      updater.apply_gradients();  // pushes to the ps tasks
      return std::vector<double>{loss.item<double>()};
    });
    strategy.serve();  // until the chief finishes
    return 0;
  }

  double window = 0;
  const int64_t rounds = steps / strategy.num_workers();
  for (int64_t r = 0; r < rounds; ++r) {
    std::vector<ps::RemoteValue> round;
    for (int w = 0; w < strategy.num_workers(); ++w) round.push_back(strategy.schedule("train"));
    strategy.join();
    for (const auto& v : round) window += ParameterServerStrategy::values(v).at(0);
    if ((r + 1) % 25 == 0 || r + 1 == rounds) {
      std::printf("round %lld: loss %.4f\n", static_cast<long long>(r + 1),
                  window / static_cast<double>(round.size() * ((r % 25) + 1)));
      window = 0;
      std::fflush(stdout);
    }
  }
  strategy.refresh_model(model);
  auto test = examples::load_fashion_mnist(data_dir, "t10k", test_samples);
  torch::NoGradGuard no_grad;
  model.train(false);
  auto pred = model.primary().forward(test.images).argmax(1);
  std::printf("test accuracy %.4f (%d workers, %d ps, %s)\n",
              pred.eq(test.labels).to(torch::kDouble).mean().item<double>(), strategy.num_workers(),
              strategy.cluster().num_ps(), mode.c_str());
  return 0;
}
