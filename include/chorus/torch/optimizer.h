// DistributedOptimizer: data-parallel training around any torch::optim::Optimizer
// (Horovod's hvd.DistributedOptimizer).
//
// At construction a hook is put on the gradient accumulator of every parameter that
// requires grad. It fires after autograd has accumulated the parameter's gradient into
// `param.grad()` during backward(), and (on the backward_passes_per_step-th pass) starts
// the engine's allreduce of that gradient under "grad/<parameter name>" at once, so the
// reduction of late layers overlaps the backward pass of earlier ones; the engine fuses
// small gradients. step() waits for what is in flight, then runs the wrapped step: every
// rank applies the same reduced gradient, so replicas that start equal (see
// broadcast_parameters) stay bit-identical.
//
// Why the accumulator's post-hook and not Tensor::register_hook: a tensor hook sees the
// incoming gradient before accumulation, so local accumulation (backward_passes_per_step)
// and gradients summed from several uses of a parameter would be reduced piecemeal. The
// post-hook sees param.grad() once per backward, after accumulation (what Horovod does
// through grad_fn.next_functions).
//
// Parameters whose gradient was not produced on some rank in a step (unused branch,
// frozen on one rank): step() submits their gradient (zeros if undefined, and the zeros
// become the parameter's grad) so every rank runs the same set of allreduces — no hang.
//
// Accumulation: as in plain libtorch, gradients of the backward_passes_per_step passes are
// summed (divide the loss by the number of passes for their mean).
//
// Thread safety: one training thread; hooks run on the thread that calls backward().
// Don't call backward() or zero_grad() while reductions are in flight (before step()).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chorus/dtype.h"
#include "chorus/engine.h"

namespace chorus {

namespace detail {
class GradientReducer;
}

struct DistributedOptimizerOptions {
  // kAverage (default) or kSum over ranks, or kAdasum: Horovod's delta optimizer. With
  // kAdasum each parameter's hook runs the wrapped optimizer's step on that parameter alone
  // (this rank's gradient and state) and starts the Adasum of the change it made; step()
  // (or synchronize()) waits and sets the parameter to its value before plus the combined
  // change, the same bits on every rank; the wrapped step() is not called again. Needs a
  // power-of-two number of ranks; no gradient buckets; fp16_compression applies to the
  // changes. Destroyed between backward and step(), it leaves each parameter as it was
  // before its local step. Others are InvalidArgument.
  ReduceOp op = ReduceOp::kAverage;
  // Send float32/float64 gradients as float16 on the wire (half the bytes; about 3
  // significant decimal digits, range +-65504). Reduced in float32 per addition.
  bool fp16_compression = false;
  // Backward passes accumulated locally before one reduction (>= 1); call step() after
  // that many passes. A gradient produced more often before step() is InvalidArgument.
  int backward_passes_per_step = 1;
  // Averaging: gradients are divided by this before the sum and multiplied back after
  // (then divided by the number of ranks): guards float16 sums against overflow.
  double gradient_predivide_factor = 1.0;
  // Gradient buckets: when the ranks share a host (Engine::alloc_shared gives memory they
  // all map), gradients live in buckets of at most this many bytes of shared memory —
  // param.grad() a tensor over its place in a bucket, as DDP's gradient_as_bucket_view —
  // and each full bucket is one allreduce that runs in shared memory. Not with
  // fp16_compression; 0 turns buckets off. Elsewhere each gradient is reduced on its own
  // and the engine fuses them.
  size_t bucket_bytes = size_t{4} << 20;
  // Names are prefix + parameter name (buckets: prefix + "bucket/<i>", their memory
  // prefix + "buckets").
  std::string name_prefix = "grad/";
  Engine* engine = nullptr;  // nullptr: the engine chorus::init() started
};

class DistributedOptimizer {
 public:
  // `named_parameters` gives the stable names (module->named_parameters()); parameters of
  // the optimizer not in it are named "<group>.<index>". REQUIRES: every rank wraps the
  // same optimizer structure with the same names. `optimizer` must outlive this object.
  DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                       const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       DistributedOptimizerOptions options = {});
  // Parameters named by position: "<group>.<index>".
  explicit DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                DistributedOptimizerOptions options = {});
  // Removes the hooks; waits for reductions in flight (errors ignored).
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // synchronize(), then the wrapped optimizer's step().
  void step();
  // Submits the reductions that hooks did not start (see above), waits for all of them
  // and leaves the reduced gradients in param.grad(). Call it yourself to clip or inspect
  // the reduced gradients before step(); step() then does not reduce again.
  // Throws the engine's errors (IoError, TimeoutError, InvalidArgument).
  void synchronize();
  // set_to_none (the default, as in PyTorch 2): every gradient becomes undefined, so the
  // next backward moves its gradient into place instead of adding it to zeros — on the
  // bucket path it is then copied once into its bucket, one pass over the gradients where
  // zeroing and adding took two. false: zeros, the wrapped optimizer's zero_grad().
  void zero_grad(bool set_to_none = true);

  ::torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptimizerOptions& options() const;

 private:
  void set_local_step();  // kAdasum: the reducer's per-parameter step

  ::torch::optim::Optimizer& optimizer_;
  std::unique_ptr<detail::GradientReducer> reducer_;  // the hooks, buckets and waits
};

}  // namespace chorus
