// A custom training loop under MirroredStrategy (tf.distribute's "custom training with
// tf.distribute.Strategy" tutorial in C++): N replicas in this process, each running its
// part of the global batch on its own thread; per-example losses scaled with
// compute_average_loss; gradients summed across replicas and applied once.
//
//   mirrored_custom_loop --replicas 2 --epochs 1
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../common/fashion_mnist.h"
#include "../common/flags.h"
#include "chorus/train.h"

int main(int argc, char** argv) {
  using namespace chorus;
  int replicas = 2, epochs = 1;
  int64_t per_replica_batch = 64, train_samples = 0, test_samples = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  examples::Flags(
      "mirrored_custom_loop",
      "[--replicas N] [--epochs E] [--batch B] [--train-samples N] [--test-samples N] [--data DIR]")
      .add("--replicas", replicas)
      .add("--epochs", epochs)
      .add("--batch", per_replica_batch)
      .add("--train-samples", train_samples)
      .add("--test-samples", test_samples)
      .add("--data", data_dir)
      .parse(argc, argv);
  examples::set_threads(1);
  MirroredStrategy strategy(replicas);
  const int64_t global_batch = per_replica_batch * strategy.num_replicas_in_sync();

  auto train = examples::load_fashion_mnist(data_dir, "train", train_samples);
  auto test = examples::load_fashion_mnist(data_dir, "t10k", test_samples);
  Dataset train_data = Dataset::from_tensor_slices({train.images, train.labels})
                           .shuffle(train.images.size(0), 7)
                           .batch(global_batch);

  torch::manual_seed(1234);
  ReplicatedModel model =
      strategy.make_model<examples::FashionNet>([] { return examples::FashionNet(); });
  torch::optim::SGD sgd(model.parameters(),
                        torch::optim::SGDOptions(0.01 * replicas).momentum(0.9));
  GradientUpdater updater = strategy.make_updater(model, sgd);
  LossFn loss_fn = losses::sparse_categorical_crossentropy();

  for (int epoch = 0; epoch < epochs; ++epoch) {
    DatasetIterator it = strategy.distribute_dataset(train_data).iterate(epoch);
    double loss_sum = 0;
    int64_t steps = 0;
    while (auto batch = it.next()) {
      std::vector<Example> parts = split_batch(*batch, strategy.num_local_replicas());
      std::vector<double> losses = strategy.run([&](ReplicaContext& ctx) {
        const Example& part = parts[static_cast<size_t>(ctx.local_replica)];
        Model& replica = model.replica(ctx.local_replica);
        torch::Tensor per_example = loss_fn(replica.forward(part[0]), part[1]);
        torch::Tensor loss = compute_average_loss(per_example, global_batch);
        loss.backward();
        return loss.item<double>();
      });
      updater.apply_gradients();
      loss_sum += strategy.reduce(ReduceOp::kSum, losses);
      ++steps;
    }
    torch::NoGradGuard no_grad;
    model.train(false);
    auto pred = model.primary().forward(test.images).argmax(1);
    const double accuracy = pred.eq(test.labels).to(torch::kDouble).mean().item<double>();
    model.train(true);
    std::printf("epoch %d: loss %.4f test accuracy %.4f (%d replicas, %lld steps)\n", epoch + 1,
                loss_sum / static_cast<double>(steps), accuracy, replicas,
                static_cast<long long>(steps));
    std::fflush(stdout);
  }
  return 0;
}
