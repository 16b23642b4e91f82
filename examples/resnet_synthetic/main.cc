// ResNet-18 on synthetic ImageNet-shaped data (3 x 224 x 224 images, 1000 classes): a large
// model (11.7 M parameters, 62 gradient tensors) through Trainer.fit under
// MultiWorkerMirroredStrategy, to show fusion and overlap on a real network shape.
//
//   chorusrun -np 2 resnet_synthetic --steps 20 --batch 8 [--warmup-steps 3]
//   resnet_synthetic --image-size 64 --steps 2      (small, as CI runs it)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../common/fashion_mnist.h"
#include "../common/flags.h"
#include "chorus/train.h"

namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", conv(in, out, 3, stride))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2", conv(out, out, 3, 1))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      down =
          register_module("down", nn::Sequential(conv(in, out, 1, stride), nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (down.is_empty() ? x : down->forward(x)));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential down{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNet18Impl : nn::Module {
  explicit ResNet18Impl(int64_t classes) {
    stem = register_module(
        "stem", nn::Sequential(conv(3, 64, 7, 2), nn::BatchNorm2d(64), nn::ReLU(),
                               nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))));
    int64_t in = 64;
    for (int64_t stage = 0; stage < 4; ++stage) {
      const int64_t out = 64 << stage;
      for (int64_t b = 0; b < 2; ++b) {
        blocks->push_back(BasicBlock(in, out, (b == 0 && stage > 0) ? 2 : 1));
        in = out;
      }
    }
    register_module("blocks", blocks);
    fc = register_module("fc", nn::Linear(512, classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = blocks->forward(stem->forward(x));
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Sequential stem{nullptr}, blocks;
  nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet18);

}  // namespace

int main(int argc, char** argv) {
  using namespace chorus;
  int64_t batch = 8, steps = 10, warmup = 0, image = 224, samples = 256;
  int threads = 1;
  examples::Flags(
      "resnet_synthetic",
      "[--batch B] [--steps S] [--warmup-steps W] [--image-size P] [--samples N] [--threads T]")
      .add("--batch", batch)
      .add("--steps", steps)
      .add("--warmup-steps", warmup)
      .add("--image-size", image)
      .add("--samples", samples)
      .add("--threads", threads)
      .parse(argc, argv);
  examples::set_threads(threads);
  MultiWorkerMirroredStrategy strategy;
  const int64_t global_batch = batch * strategy.num_replicas_in_sync();

  torch::manual_seed(42);  // the same synthetic data on every worker: DATA sharding splits it
  auto images = torch::randn({samples, 3, image, image});
  auto labels = torch::randint(0, 1000, {samples}, torch::kInt64);
  Dataset data = Dataset::from_tensor_slices({images, labels}).batch(global_batch, true).repeat();

  ReplicatedModel model = strategy.make_model<ResNet18>([] { return ResNet18(1000); });
  int64_t params = 0;
  for (const auto& p : model.parameters()) params += p.numel();
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Trainer trainer(strategy, model, sgd, losses::sparse_categorical_crossentropy(),
                  {metrics::sparse_categorical_accuracy()});
  if (strategy.is_chief()) {
    std::printf(
        "resnet_synthetic: ResNet-18, %lld parameters, %d replica(s), global batch %lld, "
        "%lldx%lld images\n",
        static_cast<long long>(params), strategy.num_replicas_in_sync(),
        static_cast<long long>(global_batch), static_cast<long long>(image),
        static_cast<long long>(image));
    std::fflush(stdout);
  }
  FitOptions fit;
  fit.epochs = 1;
  fit.verbose = 2;
  if (warmup > 0) {  // first steps allocate and fault memory in: not timed
    fit.steps_per_epoch = warmup;
    trainer.fit(data, fit);
  }
  fit.steps_per_epoch = steps;
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(data, fit);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (strategy.is_chief()) {
    std::printf("resnet_synthetic: %.1f images/s over %lld steps after %lld warmup steps\n",
                static_cast<double>(steps * global_batch) / seconds, static_cast<long long>(steps),
                static_cast<long long>(warmup));
  }
  return 0;
}
