// Helpers for torch-layer tests: deterministic models and data without torch's global RNG
// (ranks are threads of one process and would race on it), and comparison helpers.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "engine_harness.h"

namespace chorus::torch_testing {

using engine::testing::EngineGroup;

// A small MLP: 4 -> hidden -> 3.
inline ::torch::nn::Sequential make_mlp(int64_t hidden = 8) {
  return ::torch::nn::Sequential(::torch::nn::Linear(4, hidden), ::torch::nn::ReLU(),
                                 ::torch::nn::Linear(hidden, 3));
}

// Parameters set from `seed` alone: replicas with the same seed are identical.
inline void fill(::torch::nn::Module& m, double seed) {
  ::torch::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : m.parameters()) {
    auto v = ::torch::arange(p.numel(), ::torch::kFloat32).mul(0.731 + 0.1 * i++).add(seed);
    p.copy_(v.sin().mul(0.5).view_as(p));
  }
}

// Rows [begin, end) of a fixed data set of 64 rows: inputs [n, 4], labels [n] in 0..2.
inline ::torch::Tensor inputs(int64_t begin, int64_t end) {
  return ::torch::arange(begin * 4, end * 4, ::torch::kFloat32).mul(0.37).sin().view({-1, 4});
}
inline ::torch::Tensor labels(int64_t begin, int64_t end) {
  return ::torch::arange(begin, end, ::torch::kInt64).remainder(3);
}

inline ::torch::Tensor loss_of(::torch::nn::Sequential& m, int64_t begin, int64_t end) {
  return ::torch::nn::functional::cross_entropy(m->forward(inputs(begin, end)), labels(begin, end));
}

// All parameters flattened into one vector (a copy).
inline ::torch::Tensor flat_params(::torch::nn::Module& m) {
  std::vector<::torch::Tensor> v;
  for (auto& p : m.parameters()) v.push_back(p.detach().reshape(-1));
  return ::torch::cat(v);
}
inline ::torch::Tensor flat_grads(::torch::nn::Module& m) {
  std::vector<::torch::Tensor> v;
  for (auto& p : m.parameters()) v.push_back(p.grad().reshape(-1));
  return ::torch::cat(v);
}

}  // namespace chorus::torch_testing
