// What the Fashion-MNIST examples share: the multi-worker tutorial's CNN (Conv2D 32 3x3
// relu -> Flatten -> Dense 128 relu -> Dense 10, 2.77 M parameters), loading Debian's IDX
// files into tensors, and limiting the BLAS/intra-op threads.
#pragma once

#include <dlfcn.h>
#include <torch/torch.h>

#include <string>

#include "chorus/train/idx.h"

namespace chorus::examples {

struct FashionNetImpl : torch::nn::Module {
  FashionNetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 26 * 26, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv(x)).flatten(1);
    return fc2(torch::relu(fc1(x)));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(FashionNet);

struct Split {
  torch::Tensor images;  // [N, 1, 28, 28] float in [0, 1]
  torch::Tensor labels;  // [N] int64
};

// prefix "train" or "t10k"; `limit` > 0 keeps the first `limit` samples.
inline Split load_fashion_mnist(const std::string& dir, const std::string& prefix,
                                int64_t limit = 0) {
  auto img = read_idx(dir + "/" + prefix + "-images-idx3-ubyte");
  auto lab = read_idx(dir + "/" + prefix + "-labels-idx1-ubyte");
  int64_t n = img.shape.at(0);
  if (limit > 0 && limit < n) n = limit;
  Split s;
  s.images =
      torch::from_blob(img.data.data(), {n, 1, img.shape.at(1), img.shape.at(2)}, torch::kUInt8)
          .to(torch::kFloat32)
          .div_(255.0);
  s.labels = torch::from_blob(lab.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return s;
}

// Debian's libtorch calls the system BLAS; an OpenBLAS built with pthreads starts one
// thread per core whatever torch::set_num_threads says, and two workers on two cores would
// then fight over them.
inline void set_threads(int n) {
  torch::set_num_threads(n);
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

}  // namespace chorus::examples
