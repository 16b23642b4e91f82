// Helpers for trainer tests: a deterministic model factory (no global RNG: replicas and
// worker threads would race on it) and a fixed classification data set.
#pragma once

#include <torch/torch.h>

#include <string>

#include "chorus/train.h"
#include "torch_harness.h"

namespace chorus::train_testing {

// The torch layer's 4 -> 8 -> 3 MLP with fixed parameters.
inline ModelFactory mlp_factory(double seed = 0.1) {
  return [seed] {
    auto m = torch_testing::make_mlp();
    torch_testing::fill(*m, seed);
    auto impl = m.ptr();
    return Model{impl, [impl](const at::Tensor& x) { return impl->forward(x); }};
  };
}

// n rows: inputs [n, 4], labels [n] in 0..2.
inline Dataset classification_data(int64_t n) {
  return Dataset::from_tensor_slices({torch_testing::inputs(0, n), torch_testing::labels(0, n)});
}

inline std::string temp_dir(const std::string& tag) {
  std::string path = "/tmp/chorus-train-" + tag + "-XXXXXX";
  if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  return path;
}

}  // namespace chorus::train_testing
