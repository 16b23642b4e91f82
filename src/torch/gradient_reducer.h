// The gradient reduction behind DistributedOptimizer (chorus/torch/optimizer.h), without
// the optimizer: a post-hook on each parameter's gradient accumulator starts its allreduce
// (or, with gradient buckets, its bucket's once the bucket is full), and synchronize()
// starts what no hook did and waits. chorus.torch's DistributedOptimizer is built on it
// too, so that its hooks run here, in C++, and not in Python: a Python hook takes the GIL
// in the middle of backward, and took 21-51 us for most parameters of the Fashion-MNIST CNN.
//
// Implemented in optimizer.cc (one libtorch translation unit for both).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "chorus/torch/optimizer.h"

namespace chorus::detail {

// What a hook throws when a gradient arrives more often than backward_passes_per_step
// before its reduction (chorus.torch raises it as Horovod's AssertionError).
class TooManyBackwardPasses : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

class GradientReducer {
 public:
  struct Param {
    std::string name;  // the engine's name is options.name_prefix + name
    at::Tensor tensor;
  };
  // Receives what a hook threw, on the thread running backward(), and must throw (what
  // autograd then rethrows from backward()). Default: the exception as it is.
  using HookErrorHandler = std::function<void(std::exception_ptr)>;

  // Hooks every parameter (each a leaf that requires grad, InvalidArgument otherwise) and
  // requests the buckets' memory: collective, so every rank constructs its reducers in the
  // same order, with the same parameters in the same order.
  GradientReducer(std::vector<Param> params, DistributedOptimizerOptions options,
                  HookErrorHandler on_hook_error = nullptr);
  // options.op kAdasum (Horovod's delta optimizer): a gradient's round runs `step_one`
  // on its parameter (the wrapped optimizer's step on it alone), and what is reduced, with
  // Adasum, is the change that step made; waiting sets the parameter to its value before the
  // step plus the combined change. Set before the first backward; required with kAdasum.
  using LocalStep = std::function<void(const at::Tensor& param)>;
  void set_local_step(LocalStep step_one);
  // detach().
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // A round: the gradients of backward_passes_per_step backward passes, reduced once. A
  // gradient that arrives after synchronize() starts the next round (as after next_round()).

  // Starts the reductions no hook started this round: a gradient this rank did not compute
  // is reduced as zeros (so every rank runs the same reductions). A sparse gradient is not
  // reduced here: sparse_params() names it, for the caller (its bucket place is zeros).
  void submit_remaining();
  // Whether every reduction started this round finished (successfully or not).
  bool wait_for(std::chrono::milliseconds timeout);
  // submit_remaining(), then waits: every dense param.grad() holds the reduced values.
  // Throws the engine's errors (IoError, TimeoutError, InvalidArgument). Once per round:
  // later calls return at once until next_round().
  void synchronize();
  // After the optimizer's step: the next backward's gradients start the next round.
  void next_round();
  // Whether a gradient arrived or a reduction started this round and synchronize() has not
  // finished the round (zero_grad() would then race with the reductions).
  bool in_flight() const;
  // Indices (into the constructor's params) whose gradient was sparse this round.
  std::vector<size_t> sparse_params() const;
  // Whether gradients live in buckets of shared memory; waits for the memory the first time.
  bool buckets_active();
  // Whether params[i]'s gradient lives in a bucket (buckets_active() first).
  bool in_bucket(size_t i);
  const DistributedOptimizerOptions& options() const;
  void set_backward_passes_per_step(int passes);  // InvalidArgument unless passes >= 1
  // Removes the hooks and waits for what is in flight, ignoring errors (after the engine
  // stopped, those reductions failed with it: no wait). Nothing but detached() may be
  // called after; chorus.torch detaches every reducer when its engine stops.
  void detach();
  bool detached() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace chorus::detail
