// TorchState: the elastic State (chorus/elastic.h) of a libtorch training program — the
// model's parameters and buffers, the optimizer's state, and named integers (the epoch, a
// step count ...). commit() copies them in memory: parameters and buffers as tensor
// copies, the optimizer state serialised (torch::serialize; a few copies of the model's
// size per commit, so commit every step only when a step costs much more than that).
//
// Thread safety: as State; nothing else may use the model or optimizer during commit(),
// restore() or sync().
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "chorus/elastic.h"

namespace chorus::elastic {

class TorchState : public State {
 public:
  // `model` and `optimizer` must outlive the state. The state at construction is what a
  // restore() before the first commit() goes back to.
  TorchState(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer);

  // A named integer kept with the state (0 when first asked for).
  int64_t& value(const std::string& name) { return values_[name]; }

 protected:
  void save() override;
  void load() override;
  void broadcast_from(int root) override;

 private:
  std::vector<at::Tensor> tensors() const;  // parameters, then buffers, in module order

  ::torch::nn::Module& model_;
  ::torch::optim::Optimizer& optimizer_;
  std::map<std::string, int64_t> values_;
  std::vector<at::Tensor> saved_tensors_;
  std::string saved_optimizer_;
  std::map<std::string, int64_t> saved_values_;
};

}  // namespace chorus::elastic
