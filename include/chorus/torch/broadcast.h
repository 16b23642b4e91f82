// Making replicas equal: broadcast of parameters, optimizer state and arbitrary bytes from
// a root rank (Horovod's broadcast_parameters / broadcast_optimizer_state /
// broadcast_object). Call them on every rank, with the same arguments, after building the
// model and optimizer and before training (and after loading a checkpoint on the root).
//
// Errors: InvalidArgument (structure differs across ranks: the engine's mismatch error
// names the tensor), IoError, TimeoutError.
// Thread safety: one thread per rank; nothing else may use the tensors meanwhile.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "chorus/engine.h"

namespace chorus {

// Every tensor in place, named "<prefix><name>", all in flight at once.
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors,
                          int root, Engine* engine = nullptr,
                          const std::string& prefix = "bcast/param/");
// The module's parameters and buffers (batch-norm statistics ...).
void broadcast_parameters(const ::torch::nn::Module& module, int root, Engine* engine = nullptr);

// The root's per-parameter state (SGD momentum buffers, Adam's exp_avg, exp_avg_sq and
// step, ...) replaces every other rank's, matched by position in the param groups; state
// the root lacks is dropped. Hyperparameters (lr, momentum ...) are not sent: set them the
// same way everywhere. Works for any optimizer whose save()/load() round-trip (all of
// libtorch's). Serialised with torch::serialize (tensors and numbers only).
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root,
                               Engine* engine = nullptr,
                               const std::string& name = "bcast/optimizer_state");

// `bytes` on every rank becomes root's (two collectives: length, then payload).
void broadcast_bytes(std::string& bytes, int root, const std::string& name,
                     Engine* engine = nullptr);

// A trivially copyable value (a struct of numbers, an enum ...) from root.
template <typename T>
void broadcast_object(T& value, int root, const std::string& name, Engine* engine = nullptr) {
  static_assert(std::is_trivially_copyable_v<T>,
                "broadcast_object needs a trivially copyable type; serialise other types "
                "to a string and use broadcast_bytes");
  std::string bytes(reinterpret_cast<const char*>(&value), sizeof(T));
  broadcast_bytes(bytes, root, name, engine);
  std::memcpy(&value, bytes.data(), sizeof(T));
}

}  // namespace chorus
