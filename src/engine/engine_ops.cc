// The enqueue calls: local argument checks (InvalidArgument before anything is queued),
// then one LocalOp handed to the engine thread.
#include <numeric>

#include "chorus/engine.h"
#include "chorus/error.h"
#include "engine/engine_impl.h"

namespace chorus {
namespace {

void check_shape(const engine::Request& r) {
  for (int64_t d : r.shape) {
    CHORUS_CHECK_ARG(d >= 0, op_type_name(r.op), " '", r.name, "': negative dimension in shape ",
                     engine::shape_text(r.shape));
  }
  CHORUS_CHECK_ARG(r.shape.size() <= 64, op_type_name(r.op), " '", r.name, "': ", r.shape.size(),
                   " dimensions (at most 64)");
  CHORUS_CHECK_ARG(engine::within_tensor_limit(r.shape, r.dtype), op_type_name(r.op), " '", r.name,
                   "': shape ", engine::shape_text(r.shape), " is over ", engine::kMaxTensorBytes,
                   " bytes");
}

void check_first_dim(const engine::Request& r) {
  CHORUS_CHECK_ARG(!r.shape.empty(), op_type_name(r.op), " '", r.name,
                   "': needs at least one dimension");
}

engine::Request make_request(const std::string& name, OpType op, DataType dtype,
                             std::vector<int64_t> shape) {
  CHORUS_CHECK_ARG(!name.empty() && name.size() <= 4096, op_type_name(op),
                   ": the name must have 1 to 4096 bytes");
  dtype_size(dtype);  // validates dtype
  engine::Request r;
  r.name = name;
  r.op = op;
  r.dtype = dtype;
  r.shape = std::move(shape);
  check_shape(r);
  return r;
}

void check_buffer(const engine::Request& r, const void* p, const char* what) {
  CHORUS_CHECK_ARG(p != nullptr || r.elements() == 0, op_type_name(r.op), " '", r.name, "': ", what,
                   " is null");
}

// An allreduce's op: element-wise, or Adasum of floats over a power-of-two number of ranks.
void check_reduce_op(const engine::Request& r, ReduceOp op, int ranks) {
  if (op != ReduceOp::kAdasum) {
    CHORUS_CHECK_ARG(static_cast<int>(op) < kNumReduceOps, "allreduce '", r.name, "': bad op");
    return;
  }
  CHORUS_CHECK_ARG(is_floating_point(r.dtype), "allreduce '", r.name,
                   "': Adasum combines floating-point tensors, not ", dtype_name(r.dtype));
  CHORUS_CHECK_ARG((ranks & (ranks - 1)) == 0, "allreduce '", r.name,
                   "': Adasum needs a power-of-two number of ranks (it combines them pairwise), ",
                   "not ", ranks);
}

}  // namespace

Handle Engine::Impl::enqueue(engine::Request request, const void* input, void* output) {
  auto op = std::make_unique<engine::LocalOp>();
  op->request = std::move(request);
  op->input = input;
  op->output = output;
  op->handle = std::make_shared<HandleState>();
  op->enqueued = Clock::now();
  Handle handle(op->handle);
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    if (shared.stopped) std::rethrow_exception(shared.stopped);
    if (shared.shutdown_requested) CHORUS_THROW(IoError, "engine shut down");
    const std::string& name = op->request.name;
    CHORUS_CHECK_ARG(!shared.join_active, op_type_name(op->request.op), " '", name,
                     "': this rank has joined; no ops until every rank has joined");
    CHORUS_CHECK_ARG(shared.in_flight.insert(name).second, op_type_name(op->request.op),
                     ": a second op named '", name, "' while the first is in flight");
    op->seq = shared.next_seq++;
    shared.incoming.push_back(std::move(op));
  }
  shared.wake.notify_all();
  return handle;
}

Handle Engine::allreduce(const std::string& name, const void* input, void* output, DataType dtype,
                         std::vector<int64_t> shape, ReduceOp op, double prescale,
                         double postscale) {
  auto r = make_request(name, OpType::kAllreduce, dtype, std::move(shape));
  check_reduce_op(r, op, size());
  r.reduce = op;
  r.prescale = prescale;
  r.postscale = postscale;
  check_buffer(r, input, "input");
  check_buffer(r, output, "output");
  const size_t bytes = r.bytes();
  r.in_shared_memory = bytes > 0 && impl_->comm.in_shared_memory(input, bytes) &&
                       impl_->comm.in_shared_memory(output, bytes);
  return impl_->enqueue(std::move(r), input, output);
}

Handle Engine::allgather(const std::string& name, const void* input, DataType dtype,
                         std::vector<int64_t> shape) {
  auto r = make_request(name, OpType::kAllgather, dtype, std::move(shape));
  check_first_dim(r);
  check_buffer(r, input, "input");
  return impl_->enqueue(std::move(r), input, nullptr);
}

Handle Engine::broadcast(const std::string& name, void* buffer, DataType dtype,
                         std::vector<int64_t> shape, int root) {
  auto r = make_request(name, OpType::kBroadcast, dtype, std::move(shape));
  CHORUS_CHECK_ARG(root >= 0 && root < size(), "broadcast '", name, "': root ", root,
                   " out of range [0, ", size(), ")");
  r.root = root;
  check_buffer(r, buffer, "buffer");
  return impl_->enqueue(std::move(r), buffer, buffer);
}

Handle Engine::alltoall(const std::string& name, const void* input, DataType dtype,
                        std::vector<int64_t> shape, std::vector<int64_t> splits) {
  auto r = make_request(name, OpType::kAlltoall, dtype, std::move(shape));
  check_first_dim(r);
  const int n = size();
  if (splits.empty()) {
    CHORUS_CHECK_ARG(r.shape[0] % n == 0, "alltoall '", name, "': first dimension ", r.shape[0],
                     " is not a multiple of ", n, " ranks and no splits were given");
    splits.assign(n, r.shape[0] / n);
  }
  CHORUS_CHECK_ARG(static_cast<int>(splits.size()) == n, "alltoall '", name, "': ", splits.size(),
                   " splits for ", n, " ranks");
  int64_t total = 0;
  for (int64_t s : splits) {
    CHORUS_CHECK_ARG(s >= 0, "alltoall '", name, "': negative split");
    total += s;
  }
  CHORUS_CHECK_ARG(total == r.shape[0], "alltoall '", name, "': splits sum to ", total,
                   ", first dimension is ", r.shape[0]);
  r.splits = std::move(splits);
  check_buffer(r, input, "input");
  return impl_->enqueue(std::move(r), input, nullptr);
}

Handle Engine::reduce_scatter(const std::string& name, const void* input, DataType dtype,
                              std::vector<int64_t> shape, ReduceOp op, double prescale,
                              double postscale) {
  auto r = make_request(name, OpType::kReduceScatter, dtype, std::move(shape));
  check_first_dim(r);
  CHORUS_CHECK_ARG(op != ReduceOp::kAdasum, "reduce_scatter '", name,
                   "': Adasum runs in allreduce only");
  CHORUS_CHECK_ARG(static_cast<int>(op) < kNumReduceOps, "reduce_scatter '", name, "': bad op");
  r.reduce = op;
  r.prescale = prescale;
  r.postscale = postscale;
  check_buffer(r, input, "input");
  return impl_->enqueue(std::move(r), input, nullptr);
}

std::string Engine::unnamed(const std::string& prefix) {
  return prefix + ".noname." + std::to_string(impl_->shared.unnamed++);
}

Handle Engine::barrier(const std::string& name) {
  auto r = make_request(name, OpType::kBarrier, DataType::kUInt8, {0});
  return impl_->enqueue(std::move(r), nullptr, nullptr);
}

Handle Engine::alloc_shared(const std::string& name, size_t bytes) {
  CHORUS_CHECK_ARG(bytes > 0 && bytes <= static_cast<size_t>(engine::kMaxTensorBytes),
                   "alloc_shared '", name, "': ", bytes, " bytes (must be 1 .. ",
                   engine::kMaxTensorBytes, ")");
  auto r =
      make_request(name, OpType::kAllocShared, DataType::kUInt8, {static_cast<int64_t>(bytes)});
  return impl_->enqueue(std::move(r), nullptr, nullptr);
}

}  // namespace chorus
