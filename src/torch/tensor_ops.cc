// Collectives on torch::Tensor (include/chorus/torch/tensor_ops.h): dtype mapping, device
// and layout checks, contiguous staging, and the engine calls.
#include "chorus/torch/tensor_ops.h"

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "chorus/error.h"
#include "chorus/torch/runtime.h"

namespace chorus {

DataType to_chorus_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Byte:
      return DataType::kUInt8;
    case c10::ScalarType::Char:
      return DataType::kInt8;
    case c10::ScalarType::Short:
      return DataType::kInt16;
    case c10::ScalarType::Int:
      return DataType::kInt32;
    case c10::ScalarType::Long:
      return DataType::kInt64;
    case c10::ScalarType::Half:
      return DataType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DataType::kBFloat16;
    case c10::ScalarType::Float:
      return DataType::kFloat32;
    case c10::ScalarType::Double:
      return DataType::kFloat64;
    default:
      CHORUS_THROW(InvalidArgument, "chorus: tensors of dtype ", c10::toString(type),
                   " are not supported (uint8, int8, int16, int32, int64, float16, "
                   "bfloat16, float32, float64 are)");
  }
}

c10::ScalarType to_torch_dtype(DataType type) {
  switch (type) {
    case DataType::kUInt8:
      return c10::ScalarType::Byte;
    case DataType::kInt8:
      return c10::ScalarType::Char;
    case DataType::kInt16:
      return c10::ScalarType::Short;
    case DataType::kInt32:
      return c10::ScalarType::Int;
    case DataType::kInt64:
      return c10::ScalarType::Long;
    case DataType::kFloat16:
      return c10::ScalarType::Half;
    case DataType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DataType::kFloat32:
      return c10::ScalarType::Float;
    case DataType::kFloat64:
      return c10::ScalarType::Double;
  }
  CHORUS_THROW(InvalidArgument, "chorus: unknown DataType ", static_cast<int>(type));
}

void check_tensor(const at::Tensor& tensor, const char* what) {
  CHORUS_CHECK_ARG(tensor.defined(), "chorus ", what, ": undefined tensor");
  // The device is a property of the tensor: when a CUDA path exists (device buffers handed
  // to a device-aware communicator) it plugs in here; until then nothing is sent.
  CHORUS_CHECK_ARG(tensor.device().is_cpu(), "chorus ", what, ": tensors on ",
                   tensor.device().str(), " are not supported yet (CPU only); use .cpu()");
  CHORUS_CHECK_ARG(tensor.layout() == c10::kStrided, "chorus ", what,
                   ": only dense (strided) tensors are supported");
  to_chorus_dtype(tensor.scalar_type());
}

struct TensorHandle::State {
  Handle handle;
  OpType op = OpType::kAllreduce;
  at::Tensor input;   // kept alive: the engine reads it until the op finishes
  at::Tensor output;  // allreduce / broadcast: the contiguous buffer the engine writes
  at::Tensor target;  // in place, non-contiguous: the caller's tensor to copy output into
  at::Tensor result;
  bool finished = false;
};

namespace {

std::vector<int64_t> shape_of(const at::Tensor& t) { return t.sizes().vec(); }

std::string name_or_auto(const std::string& name, Engine& engine, const char* op) {
  return name.empty() ? detail::auto_name(engine, op) : name;
}

std::shared_ptr<TensorHandle::State> new_state(OpType op, const at::Tensor& input) {
  auto s = std::make_shared<TensorHandle::State>();
  s->op = op;
  s->input = input.contiguous();
  return s;
}

// The engine-owned output of allgather / alltoall / reduce_scatter as a tensor, without a
// copy: the tensor's deleter keeps a copy of the handle, which owns the buffer.
at::Tensor engine_output(const Handle& h, c10::ScalarType dtype) {
  const std::vector<int64_t>& shape = h.shape();
  if (h.bytes() == 0) return at::empty(shape, at::TensorOptions().dtype(dtype));
  Handle keep = h;
  return at::from_blob(
      const_cast<void*>(h.data()), shape, [keep](void*) {}, at::TensorOptions().dtype(dtype));
}

void finish(TensorHandle::State& s) {
  if (s.finished) return;
  if (s.op == OpType::kAllreduce || s.op == OpType::kBroadcast) {
    if (s.target.defined()) {
      at::NoGradGuard no_grad;
      s.target.copy_(s.output);
      s.result = s.target;
    } else {
      s.result = s.output;
    }
  } else {
    s.result = engine_output(s.handle, s.input.scalar_type());
  }
  s.input.reset();
  s.output.reset();
  s.target.reset();
  s.finished = true;
}

// Staging for allreduce / broadcast: `in_place` writes into `tensor` (through a contiguous
// copy when needed), otherwise into a new contiguous tensor.
std::shared_ptr<TensorHandle::State> stage(OpType op, at::Tensor& tensor, bool in_place) {
  auto s = new_state(op, tensor);
  if (!in_place) {
    s->output = op == OpType::kBroadcast ? s->input.clone() : at::empty_like(s->input);
    if (op == OpType::kBroadcast) s->input = s->output;
  } else {
    s->output = s->input;
    if (!s->input.is_same(tensor)) s->target = tensor;
  }
  return s;
}

TensorHandle allreduce_impl(at::Tensor& tensor, const std::string& name, const CollectiveOptions& o,
                            bool in_place) {
  check_tensor(tensor, "allreduce");
  Engine& e = detail::engine_or_default(o.engine);
  auto s = stage(OpType::kAllreduce, tensor, in_place);
  s->handle = e.allreduce(name_or_auto(name, e, "allreduce"), s->input.data_ptr(),
                          s->output.data_ptr(), to_chorus_dtype(tensor.scalar_type()),
                          shape_of(tensor), o.op, o.prescale, o.postscale);
  return TensorHandle(std::move(s));
}

TensorHandle broadcast_impl(at::Tensor& tensor, int root, const std::string& name,
                            const CollectiveOptions& o, bool in_place) {
  check_tensor(tensor, "broadcast");
  Engine& e = detail::engine_or_default(o.engine);
  auto s = stage(OpType::kBroadcast, tensor, in_place);
  s->handle = e.broadcast(name_or_auto(name, e, "broadcast"), s->output.data_ptr(),
                          to_chorus_dtype(tensor.scalar_type()), shape_of(tensor), root);
  return TensorHandle(std::move(s));
}

}  // namespace

bool TensorHandle::poll() const {
  CHORUS_CHECK_ARG(state_ != nullptr, "chorus: poll() on an empty TensorHandle");
  return state_->finished || state_->handle.poll();
}

bool TensorHandle::wait_for(std::chrono::milliseconds timeout) const {
  CHORUS_CHECK_ARG(state_ != nullptr, "chorus: wait_for() on an empty TensorHandle");
  return state_->finished || state_->handle.wait_for(timeout);
}

at::Tensor TensorHandle::wait() {
  CHORUS_CHECK_ARG(state_ != nullptr, "chorus: wait() on an empty TensorHandle");
  if (!state_->finished) {
    state_->handle.wait();
    finish(*state_);
  }
  return state_->result;
}

std::vector<int64_t> TensorHandle::received_splits() const {
  CHORUS_CHECK_ARG(state_ != nullptr && state_->finished,
                   "chorus: received_splits() before wait() returned");
  return state_->handle.received_splits();
}

TensorHandle allreduce_async(const at::Tensor& tensor, const std::string& name,
                             const CollectiveOptions& options) {
  at::Tensor t = tensor;
  return allreduce_impl(t, name, options, false);
}

TensorHandle allreduce_async_(at::Tensor& tensor, const std::string& name,
                              const CollectiveOptions& options) {
  return allreduce_impl(tensor, name, options, true);
}

at::Tensor allreduce(const at::Tensor& tensor, const std::string& name,
                     const CollectiveOptions& options) {
  return allreduce_async(tensor, name, options).wait();
}

at::Tensor& allreduce_(at::Tensor& tensor, const std::string& name,
                       const CollectiveOptions& options) {
  allreduce_async_(tensor, name, options).wait();
  return tensor;
}

TensorHandle allgather_async(const at::Tensor& tensor, const std::string& name,
                             const CollectiveOptions& o) {
  check_tensor(tensor, "allgather");
  CHORUS_CHECK_ARG(tensor.dim() >= 1, "chorus allgather: needs at least one dimension, '", name,
                   "' is a scalar");
  Engine& e = detail::engine_or_default(o.engine);
  auto s = new_state(OpType::kAllgather, tensor);
  s->handle = e.allgather(name_or_auto(name, e, "allgather"), s->input.data_ptr(),
                          to_chorus_dtype(tensor.scalar_type()), shape_of(tensor));
  return TensorHandle(std::move(s));
}

at::Tensor allgather(const at::Tensor& tensor, const std::string& name,
                     const CollectiveOptions& options) {
  return allgather_async(tensor, name, options).wait();
}

TensorHandle broadcast_async(const at::Tensor& tensor, int root, const std::string& name,
                             const CollectiveOptions& options) {
  at::Tensor t = tensor;
  return broadcast_impl(t, root, name, options, false);
}

TensorHandle broadcast_async_(at::Tensor& tensor, int root, const std::string& name,
                              const CollectiveOptions& options) {
  return broadcast_impl(tensor, root, name, options, true);
}

at::Tensor broadcast(const at::Tensor& tensor, int root, const std::string& name,
                     const CollectiveOptions& options) {
  return broadcast_async(tensor, root, name, options).wait();
}

at::Tensor& broadcast_(at::Tensor& tensor, int root, const std::string& name,
                       const CollectiveOptions& options) {
  broadcast_async_(tensor, root, name, options).wait();
  return tensor;
}

TensorHandle alltoall_async(const at::Tensor& tensor, std::vector<int64_t> splits,
                            const std::string& name, const CollectiveOptions& o) {
  check_tensor(tensor, "alltoall");
  CHORUS_CHECK_ARG(tensor.dim() >= 1, "chorus alltoall: needs at least one dimension");
  Engine& e = detail::engine_or_default(o.engine);
  auto s = new_state(OpType::kAlltoall, tensor);
  s->handle =
      e.alltoall(name_or_auto(name, e, "alltoall"), s->input.data_ptr(),
                 to_chorus_dtype(tensor.scalar_type()), shape_of(tensor), std::move(splits));
  return TensorHandle(std::move(s));
}

at::Tensor alltoall(const at::Tensor& tensor, std::vector<int64_t> splits, const std::string& name,
                    const CollectiveOptions& options) {
  return alltoall_async(tensor, std::move(splits), name, options).wait();
}

TensorHandle reduce_scatter_async(const at::Tensor& tensor, const std::string& name,
                                  const CollectiveOptions& o) {
  check_tensor(tensor, "reduce_scatter");
  CHORUS_CHECK_ARG(tensor.dim() >= 1, "chorus reduce_scatter: needs at least one dimension");
  Engine& e = detail::engine_or_default(o.engine);
  auto s = new_state(OpType::kReduceScatter, tensor);
  s->handle = e.reduce_scatter(name_or_auto(name, e, "reduce_scatter"), s->input.data_ptr(),
                               to_chorus_dtype(tensor.scalar_type()), shape_of(tensor), o.op,
                               o.prescale, o.postscale);
  return TensorHandle(std::move(s));
}

at::Tensor reduce_scatter(const at::Tensor& tensor, const std::string& name,
                          const CollectiveOptions& options) {
  return reduce_scatter_async(tensor, name, options).wait();
}

void barrier(const std::string& name, Engine* engine) {
  detail::engine_or_default(engine).barrier(name).wait();
}

namespace {
double scalar_allreduce(double value, const std::string& name, Engine* engine, ReduceOp op) {
  double out = 0;
  detail::engine_or_default(engine)
      .allreduce(name, &value, &out, DataType::kFloat64, {1}, op)
      .wait();
  return out;
}
}  // namespace

double metric_average(double value, const std::string& name, Engine* engine) {
  return scalar_allreduce(value, name, engine, ReduceOp::kAverage);
}

double metric_sum(double value, const std::string& name, Engine* engine) {
  return scalar_allreduce(value, name, engine, ReduceOp::kSum);
}

}  // namespace chorus
