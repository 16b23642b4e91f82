// DistributedOptimizer (include/chorus/torch/optimizer.h) and the GradientReducer behind it
// (torch/gradient_reducer.h): a post-hook on each parameter's gradient accumulator starts
// its allreduce (or, with gradient buckets, its bucket's once the bucket is full);
// synchronize() fills in the parameters whose hook did not fire and waits for everything.
#include "chorus/torch/optimizer.h"

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>
#include <unordered_map>

#include "chorus/error.h"
#include "chorus/torch/runtime.h"
#include "chorus/torch/tensor_ops.h"
#include "torch/gradient_buckets.h"
#include "torch/gradient_reducer.h"
#include "torch/shared_heap.h"

namespace chorus {
namespace detail {

namespace {

// One parameter that requires grad.
struct Slot {
  at::Tensor param;
  std::string name;  // engine name: prefix + parameter name
  // Held so the accumulator (and our hook on it) lives as long as we do: the parameter
  // keeps only a weak reference and would otherwise build a new one per backward.
  std::shared_ptr<::torch::autograd::Node> accumulator;
  uintptr_t hook_key = 0;
  int passes = 0;          // gradients accumulated since the last round
  bool submitted = false;  // reduction started this round (its own or its bucket's)
  bool sparse = false;     // its gradient was sparse this round: left to the caller
  at::Tensor wire;         // the buffer being reduced (the grad, or its float16 copy)
  at::Tensor start;        // kAdasum: the parameter before its local step
  Handle handle;
  int bucket = -1;  // with gradient buckets: its bucket, and its grad's place in it
  at::Tensor view;
};

// Parameters whose gradients lie together in shared memory and are reduced as one.
struct Bucket {
  std::vector<size_t> slots;
  at::Tensor flat;  // the whole bucket as one tensor of its dtype
  std::string name;
  size_t ready = 0;  // slots whose gradient is in
  bool submitted = false;
  Handle handle;
};

}  // namespace

struct GradientReducer::State {
  mutable std::mutex mu;
  DistributedOptimizerOptions options;
  HookErrorHandler on_hook_error;
  Engine* engine = nullptr;             // nullptr once detached
  GradientReducer::LocalStep step_one;  // kAdasum
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;  // empty: every gradient reduced on its own
  Handle bucket_memory;         // alloc_shared in flight, until the first gradient
  detail::BucketLayout layout;
  bool synchronized = false;  // synchronize() done this round

  void on_gradient(size_t i);
  void new_round();
  void start(Slot& slot);
  void submit(Slot& slot);
  void submit_change(Slot& slot);
  void wait_all();
  void wait_all_quietly() noexcept;

  void request_buckets();
  void make_buckets();
  void adopt_gradient(Slot& slot);
  void submit(Bucket& bucket);
};

namespace {

class GradientReadyHook : public ::torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(std::weak_ptr<GradientReducer::State> state, size_t index)
      : state_(std::move(state)), index_(index) {}

  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    auto s = state_.lock();
    if (!s) return outputs;
    try {
      s->on_gradient(index_);
    } catch (...) {
      if (!s->on_hook_error) throw;
      s->on_hook_error(std::current_exception());
    }
    return outputs;
  }

 private:
  std::weak_ptr<GradientReducer::State> state_;
  size_t index_;
};

// A tensor of `sizes` and `dtype` over memory[offset ...), keeping the memory alive.
at::Tensor tensor_in(const SharedBuffer& memory, size_t offset, at::IntArrayRef sizes,
                     c10::ScalarType dtype) {
  char* data = static_cast<char*>(memory.data()) + offset;
  return at::from_blob(
      data, sizes, [memory](void*) {}, at::TensorOptions().dtype(dtype));
}

bool compressible(const at::Tensor& t) {
  return t.scalar_type() == c10::ScalarType::Float || t.scalar_type() == c10::ScalarType::Double;
}

}  // namespace

void GradientReducer::State::on_gradient(size_t i) {
  std::lock_guard<std::mutex> lock(mu);
  if (engine == nullptr) return;  // detached
  if (synchronized) new_round();
  Slot& slot = slots[i];
  ++slot.passes;
  if (slot.passes > options.backward_passes_per_step || slot.submitted) {
    CHORUS_THROW(TooManyBackwardPasses, "gradient of '", slot.name, "' computed ", slot.passes,
                 " times, more than backward_passes_per_step (", options.backward_passes_per_step,
                 ") before the optimizer's step: increase backward_passes_per_step to "
                 "accumulate gradients locally");
  }
  if (slot.passes < options.backward_passes_per_step) return;
  start(slot);
}

// REQUIRES: mu held (from here on).
void GradientReducer::State::new_round() {
  for (Slot& slot : slots) {
    slot.passes = 0;
    slot.submitted = false;
    slot.sparse = false;
  }
  for (Bucket& bucket : buckets) {
    bucket.ready = 0;
    bucket.submitted = false;
  }
  synchronized = false;
}

// Starts the slot's reduction, or its bucket's.
void GradientReducer::State::start(Slot& slot) {
  make_buckets();
  const at::Tensor& grad = slot.param.grad();
  slot.sparse = grad.defined() && grad.is_sparse();
  if (slot.bucket < 0) {
    if (slot.sparse) {
      slot.submitted = true;
      return;
    }
    return submit(slot);
  }
  if (slot.sparse) {
    at::NoGradGuard no_grad;
    slot.view.zero_();  // its bucket goes on without it
  } else {
    adopt_gradient(slot);
  }
  slot.submitted = true;
  Bucket& bucket = buckets[slot.bucket];
  if (++bucket.ready == bucket.slots.size()) submit(bucket);
}

// Buckets when gradients are averaged or summed as they are (no float16 copies) over
// ranks that may share memory; whether they do is known when the memory arrives.
void GradientReducer::State::request_buckets() {
  if (options.bucket_bytes == 0 || options.fp16_compression || engine->size() < 2 ||
      options.op == ReduceOp::kAdasum) {
    return;
  }
  std::vector<detail::BucketParam> params;
  for (const Slot& slot : slots) {
    params.push_back({static_cast<size_t>(slot.param.numel()) * slot.param.element_size(),
                      to_chorus_dtype(slot.param.scalar_type())});
  }
  // Gradients born in shared memory (the default engine's heap) are reduced where they are.
  layout = detail::plan_buckets(params, options.bucket_bytes,
                                detail::in_place_min_bytes(options.engine == nullptr));
  if (layout.total_bytes == 0) return;
  bucket_memory = engine->alloc_shared(options.name_prefix + "buckets", layout.total_bytes);
}

// Waits for the memory the first time a gradient needs it: where it is shared, each
// parameter's grad becomes a tensor over its place in a bucket.
void GradientReducer::State::make_buckets() {
  if (!bucket_memory.valid()) return;
  Handle request = std::move(bucket_memory);
  bucket_memory = Handle();
  request.wait();
  const SharedBuffer memory = request.shared_buffer();
  if (!memory.shared()) return;  // ranks on several hosts: the memory goes, as it came
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    const detail::BucketLayout::Bucket& planned = layout.buckets[b];
    Bucket bucket;
    bucket.slots = planned.params;
    bucket.flat = tensor_in(memory, planned.offset,
                            {static_cast<int64_t>(planned.bytes / dtype_size(planned.dtype))},
                            to_torch_dtype(planned.dtype));
    bucket.name = options.name_prefix + "bucket/" + std::to_string(b);
    buckets.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& slot = slots[i];
    slot.bucket = layout.bucket_of[i];
    if (slot.bucket < 0) continue;
    slot.view =
        tensor_in(memory, layout.offset_of[i], slot.param.sizes(), slot.param.scalar_type());
  }
}

// Makes the parameter's grad its view: a gradient autograd put elsewhere (the first
// backward, after zero_grad(set_to_none), under create_graph) is copied in; an undefined
// one is zeros, so every rank reduces every bucket.
void GradientReducer::State::adopt_gradient(Slot& slot) {
  at::NoGradGuard no_grad;
  at::Tensor& grad = slot.param.mutable_grad();
  if (grad.defined() && grad.data_ptr() == slot.view.data_ptr() &&
      grad.strides() == slot.view.strides()) {
    return;
  }
  if (grad.defined()) {
    slot.view.copy_(grad);
  } else {
    slot.view.zero_();
  }
  grad = slot.view;
}

void GradientReducer::State::submit(Bucket& bucket) {
  const bool average = options.op == ReduceOp::kAverage;
  const double f = options.gradient_predivide_factor;
  bucket.handle =
      engine->allreduce(bucket.name, bucket.flat.data_ptr(), bucket.flat.data_ptr(),
                        to_chorus_dtype(bucket.flat.scalar_type()), {bucket.flat.numel()},
                        options.op, average ? 1.0 / f : 1.0, average ? f : 1.0);
  bucket.submitted = true;
}

void GradientReducer::State::submit(Slot& slot) {
  at::Tensor& grad = slot.param.mutable_grad();
  // A gradient this rank did not produce: zeros, so that every rank submits every name.
  if (!grad.defined()) grad = at::zeros_like(slot.param);
  if (options.op == ReduceOp::kAdasum) return submit_change(slot);
  if (!grad.is_contiguous()) grad = grad.contiguous();
  const bool average = options.op == ReduceOp::kAverage;
  const double f = options.gradient_predivide_factor;
  slot.wire =
      options.fp16_compression && compressible(grad) ? grad.to(c10::ScalarType::Half) : grad;
  slot.handle = engine->allreduce(slot.name, slot.wire.data_ptr(), slot.wire.data_ptr(),
                                  to_chorus_dtype(slot.wire.scalar_type()), slot.wire.sizes().vec(),
                                  options.op, average ? 1.0 / f : 1.0, average ? f : 1.0);
  slot.submitted = true;
}

// kAdasum: the local step on the parameter alone, then the Adasum of the change, in place
// in the parameter (or its float16 copy) until wait_all() puts start + change back.
void GradientReducer::State::submit_change(Slot& slot) {
  at::NoGradGuard no_grad;
  CHORUS_CHECK_ARG(step_one != nullptr, "GradientReducer with Adasum: set_local_step() first");
  CHORUS_CHECK_ARG(slot.param.is_contiguous(), "DistributedOptimizer with Adasum: parameter '",
                   slot.name, "' is not contiguous");
  if (!slot.start.defined()) slot.start = at::empty_like(slot.param);
  slot.start.copy_(slot.param);
  step_one(slot.param);
  slot.param.sub_(slot.start);
  slot.wire = options.fp16_compression && compressible(slot.param)
                  ? slot.param.to(c10::ScalarType::Half)
                  : slot.param;
  slot.handle = engine->allreduce(slot.name, slot.wire.data_ptr(), slot.wire.data_ptr(),
                                  to_chorus_dtype(slot.wire.scalar_type()), slot.wire.sizes().vec(),
                                  ReduceOp::kAdasum);
  slot.submitted = true;
}

void GradientReducer::State::wait_all() {
  at::NoGradGuard no_grad;
  for (Bucket& bucket : buckets) {
    Handle h = std::move(bucket.handle);
    bucket.handle = Handle();
    if (h.valid()) h.wait();
  }
  for (Slot& slot : slots) {
    if (!slot.handle.valid()) continue;
    Handle h = std::move(slot.handle);
    slot.handle = Handle();
    h.wait();
    if (options.op == ReduceOp::kAdasum) {
      slot.start.add_(slot.wire);
      slot.param.copy_(slot.start);
    } else {
      at::Tensor& grad = slot.param.mutable_grad();
      if (!slot.wire.is_same(grad)) grad.copy_(slot.wire);  // float16 back to the grad's dtype
    }
    slot.wire.reset();
  }
}

void GradientReducer::State::wait_all_quietly() noexcept {
  std::vector<Handle*> handles{&bucket_memory};
  for (Bucket& bucket : buckets) handles.push_back(&bucket.handle);
  for (Slot& slot : slots) handles.push_back(&slot.handle);
  for (Handle* h : handles) {
    try {
      if (h->valid()) h->wait();
    } catch (...) {
      // Detaching: the engine is stopping or failed; the error was reported elsewhere.
    }
    *h = Handle();
  }
  if (options.op != ReduceOp::kAdasum) return;
  // A parameter holding its change gets a value back: its value before the local step.
  for (Slot& slot : slots) {
    if (!slot.wire.defined()) continue;
    try {
      at::NoGradGuard no_grad;
      slot.param.copy_(slot.start);
    } catch (...) {
    }
    slot.wire.reset();
  }
}

GradientReducer::GradientReducer(std::vector<Param> params, DistributedOptimizerOptions options,
                                 HookErrorHandler on_hook_error)
    : state_(std::make_shared<State>()) {
  const DistributedOptimizerOptions& o = state_->options = std::move(options);
  CHORUS_CHECK_ARG(
      o.op == ReduceOp::kAverage || o.op == ReduceOp::kSum || o.op == ReduceOp::kAdasum,
      "DistributedOptimizer: op must be average, sum or adasum, got ", reduce_op_name(o.op));
  CHORUS_CHECK_ARG(o.backward_passes_per_step >= 1,
                   "DistributedOptimizer: backward_passes_per_step must be >= 1, got ",
                   o.backward_passes_per_step);
  CHORUS_CHECK_ARG(o.gradient_predivide_factor > 0,
                   "DistributedOptimizer: gradient_predivide_factor must be > 0, got ",
                   o.gradient_predivide_factor);
  state_->on_hook_error = std::move(on_hook_error);
  state_->engine = &detail::engine_or_default(o.engine);
  const int ranks = state_->engine->size();
  CHORUS_CHECK_ARG(o.op != ReduceOp::kAdasum || (ranks & (ranks - 1)) == 0,
                   "DistributedOptimizer with Adasum needs a power-of-two number of ranks (it "
                   "combines them pairwise), not ",
                   ranks);
  for (Param& p : params) {
    CHORUS_CHECK_ARG(p.tensor.requires_grad() && p.tensor.is_leaf(),
                     "DistributedOptimizer: ", p.name, " is not a leaf tensor that requires grad");
    check_tensor(p.tensor, "DistributedOptimizer");
    Slot slot;
    slot.param = std::move(p.tensor);
    slot.name = o.name_prefix + p.name;
    state_->slots.push_back(std::move(slot));
  }
  state_->request_buckets();
  for (size_t i = 0; i < state_->slots.size(); ++i) {
    Slot& slot = state_->slots[i];
    slot.accumulator = ::torch::autograd::impl::grad_accumulator(slot.param);
    slot.hook_key = slot.accumulator->add_post_hook(
        std::make_unique<GradientReadyHook>(std::weak_ptr<State>(state_), i));
  }
}

GradientReducer::~GradientReducer() { detach(); }

void GradientReducer::detach() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->engine == nullptr) return;
  state_->wait_all_quietly();
  for (Slot& slot : state_->slots) {
    if (slot.accumulator) slot.accumulator->del_post_hook(slot.hook_key);
    slot.accumulator.reset();
  }
  state_->engine = nullptr;
}

bool GradientReducer::detached() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->engine == nullptr;
}

void GradientReducer::submit_remaining() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->synchronized) return;
  state_->make_buckets();
  for (Slot& slot : state_->slots) {
    if (!slot.submitted) state_->start(slot);
  }
  for (Bucket& bucket : state_->buckets) {
    if (!bucket.submitted) state_->submit(bucket);
  }
}

bool GradientReducer::wait_for(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const Bucket& bucket : state_->buckets) {
    if (bucket.handle.valid() && !bucket.handle.wait_for(timeout)) return false;
  }
  for (const Slot& slot : state_->slots) {
    if (slot.handle.valid() && !slot.handle.wait_for(timeout)) return false;
  }
  return true;
}

void GradientReducer::synchronize() {
  submit_remaining();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->synchronized) return;
  state_->synchronized = true;  // also when a wait throws: the round's reductions are over
  state_->wait_all();
}

void GradientReducer::next_round() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->new_round();
}

bool GradientReducer::in_flight() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->synchronized) return false;
  for (const Slot& slot : state_->slots) {
    if (slot.passes > 0 || slot.submitted) return true;
  }
  return false;
}

std::vector<size_t> GradientReducer::sparse_params() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<size_t> out;
  for (size_t i = 0; i < state_->slots.size(); ++i) {
    if (state_->slots[i].sparse) out.push_back(i);
  }
  return out;
}

bool GradientReducer::buckets_active() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->make_buckets();
  return !state_->buckets.empty();
}

bool GradientReducer::in_bucket(size_t i) {
  std::lock_guard<std::mutex> lock(state_->mu);
  CHORUS_CHECK_ARG(i < state_->slots.size(), "no parameter ", i);
  return state_->slots[i].view.defined();
}

const DistributedOptimizerOptions& GradientReducer::options() const { return state_->options; }

void GradientReducer::set_local_step(LocalStep step_one) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->step_one = std::move(step_one);
}

void GradientReducer::set_backward_passes_per_step(int passes) {
  CHORUS_CHECK_ARG(passes >= 1, "backward_passes_per_step must be >= 1, got ", passes);
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->options.backward_passes_per_step = passes;
}

}  // namespace detail

namespace {

// The optimizer's parameters that require grad, once each, named by `named_parameters`
// or else "<group>.<index>".
std::vector<detail::GradientReducer::Param> reduced_params(
    ::torch::optim::Optimizer& optimizer,
    const ::torch::OrderedDict<std::string, at::Tensor>* named_parameters) {
  std::unordered_map<const void*, std::string> names;
  if (named_parameters) {
    for (const auto& item : *named_parameters) {
      names.emplace(item.value().unsafeGetTensorImpl(), item.key());
    }
  }
  std::unordered_map<const void*, bool> seen;
  std::vector<detail::GradientReducer::Param> out;
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t j = 0; j < params.size(); ++j) {
      const at::Tensor& p = params[j];
      if (!p.requires_grad() || !seen.emplace(p.unsafeGetTensorImpl(), true).second) continue;
      auto it = names.find(p.unsafeGetTensorImpl());
      out.push_back(
          {it != names.end() ? it->second : std::to_string(g) + "." + std::to_string(j), p});
    }
  }
  return out;
}

// The optimizer's step on `param` alone: every group but its own emptied for the call, so
// the step uses the parameter's group settings and state.
void step_one(::torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto& groups = optimizer.param_groups();
  std::vector<std::vector<at::Tensor>> stashed;
  for (auto& group : groups) {
    stashed.push_back(group.params());
    bool mine = false;
    for (const at::Tensor& p : group.params()) mine = mine || p.is_same(param);
    group.params() = mine ? std::vector<at::Tensor>{param} : std::vector<at::Tensor>{};
  }
  auto restore = [&] {
    for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = std::move(stashed[g]);
  };
  try {
    optimizer.step();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(
    ::torch::optim::Optimizer& optimizer,
    const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
    DistributedOptimizerOptions options)
    : optimizer_(optimizer),
      reducer_(std::make_unique<detail::GradientReducer>(
          reduced_params(optimizer, &named_parameters), std::move(options))) {
  set_local_step();
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer),
      reducer_(std::make_unique<detail::GradientReducer>(reduced_params(optimizer, nullptr),
                                                         std::move(options))) {
  set_local_step();
}

void DistributedOptimizer::set_local_step() {
  if (options().op != ReduceOp::kAdasum) return;
  reducer_->set_local_step([this](const at::Tensor& p) { step_one(optimizer_, p); });
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::synchronize() {
  reducer_->synchronize();
  CHORUS_CHECK_ARG(reducer_->sparse_params().empty(),
                   "DistributedOptimizer: sparse gradients are not supported in C++ (use a "
                   "dense embedding, or chorus.torch's optimizer in Python)");
}

void DistributedOptimizer::step() {
  synchronize();
  if (options().op != ReduceOp::kAdasum) optimizer_.step();  // Adasum: each hook stepped
  reducer_->next_round();
}

void DistributedOptimizer::zero_grad(bool set_to_none) {
  if (!set_to_none) return optimizer_.zero_grad();
  for (auto& group : optimizer_.param_groups()) {
    for (auto& p : group.params()) p.mutable_grad().reset();
  }
}

const DistributedOptimizerOptions& DistributedOptimizer::options() const {
  return reducer_->options();
}

}  // namespace chorus
