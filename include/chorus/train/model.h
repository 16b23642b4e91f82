// Models as strategies see them: a module plus its forward function, built by a factory
// so that a strategy can make as many replicas as it needs (the C++ counterpart of
// creating a Keras model inside `with strategy.scope():`).
//
// Thread safety: a Model is used by one replica thread at a time; ReplicatedModel's
// accessors may be called from any thread once the strategy has built it.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chorus {

struct Model {
  std::shared_ptr<::torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor& input)> forward;
};

using ModelFactory = std::function<Model()>;

// A factory for a TORCH_MODULE holder type (`Net` for `struct NetImpl`): calls `make()` and
// uses the holder's forward(Tensor).
template <typename Holder>
ModelFactory model_factory(std::function<Holder()> make) {
  return [make = std::move(make)] {
    Holder holder = make();
    auto impl = holder.ptr();
    return Model{impl, [impl](const at::Tensor& x) { return impl->forward(x); }};
  };
}

// The replicas one process holds for a strategy. Replica 0 is the primary: the optimizer
// is built on its parameters, checkpoints are taken from it. Other replicas are either
// mirrors (MirroredStrategy: own tensors kept equal to the primary's after every update)
// or the primary itself (CentralStorageStrategy: one copy of the variables, shared).
class ReplicatedModel {
 public:
  ReplicatedModel() = default;
  ReplicatedModel(std::vector<Model> replicas, bool shared_variables)
      : replicas_(std::move(replicas)), shared_variables_(shared_variables) {}

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  Model& replica(int local_replica) { return replicas_.at(static_cast<size_t>(local_replica)); }
  Model& primary() { return replicas_.at(0); }
  ::torch::nn::Module& module() { return *primary().module; }
  std::vector<at::Tensor> parameters() const { return replicas_.at(0).module->parameters(); }
  // True when every replica reads the primary's tensors (nothing to copy after a step).
  bool shared_variables() const { return shared_variables_; }

  // train() / eval() on every replica.
  void train(bool on = true);

  // Copies the primary's parameters and buffers into the other replicas (no-op when the
  // variables are shared). Called after every update and after a restore.
  void sync_replicas();

 private:
  std::vector<Model> replicas_;
  bool shared_variables_ = false;
};

}  // namespace chorus
