// Collectives on torch::Tensor through the engine (Horovod's hvd.allreduce & co.).
//
// Every op is named: ranks pair up their tensors by name, in any order (see engine.h).
// An empty name picks "<op>.noname.<n>", which requires every rank to issue its unnamed
// ops in the same order. A name may be in flight only once per rank.
//
// Tensors: any layout (non-contiguous tensors are copied to a contiguous buffer and, for
// the in-place variants, copied back); dtypes uint8, int8, int16, int32, int64, float16,
// bfloat16, float32, float64 (others: InvalidArgument naming the dtype). The device is
// the tensor's: CPU today; other devices are an InvalidArgument until a device path
// exists (nothing is sent). Shapes, dtypes and ops must agree across ranks, or every
// rank's op fails with InvalidArgument (see engine.h).
//
// Async variants return a TensorHandle; the input (and, in place, the tensor) must not be
// written until it finishes. Sync variants wait with CHORUS_TIMEOUT_SECONDS.
//
// Errors: as engine.h: InvalidArgument, IoError, TimeoutError.
// Thread safety: any thread; TensorHandle::wait() from one thread at a time per handle.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "chorus/dtype.h"
#include "chorus/engine.h"

namespace chorus {

struct CollectiveOptions {
  ReduceOp op = ReduceOp::kAverage;  // allreduce and reduce_scatter
  double prescale = 1.0;             // applied to each rank's input before the reduction
  double postscale = 1.0;            // applied to the result
  Engine* engine = nullptr;          // nullptr: the engine chorus::init() started
};

// chorus dtype of a tensor dtype; InvalidArgument for unsupported ones (bool, int16,
// complex, quantized ...).
DataType to_chorus_dtype(c10::ScalarType type);
c10::ScalarType to_torch_dtype(DataType type);
// InvalidArgument unless the tensor is defined, on a supported device (CPU) and dtype.
void check_tensor(const at::Tensor& tensor, const char* what);

class TensorHandle {
 public:
  struct State;
  TensorHandle() = default;
  explicit TensorHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // Whether the op finished; never blocks (yields the core when not: Handle::poll).
  bool poll() const;
  // Waits (CHORUS_TIMEOUT_SECONDS) and returns the result: the output tensor (for the
  // in-place variants, the caller's tensor, now holding the result). Throws the op's
  // error. May be called again; later calls return the same tensor.
  at::Tensor wait();
  // Waits up to `timeout`; whether the op finished (then wait() returns at once). Never
  // throws the op's error.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // alltoall: rows received from each rank. REQUIRES: wait() returned.
  std::vector<int64_t> received_splits() const;

 private:
  std::shared_ptr<State> state_;
};

// Horovod's name for TensorHandle::wait().
inline at::Tensor synchronize(TensorHandle& handle) { return handle.wait(); }

// Reduction over ranks (average by default): a new tensor, or in place (`_`).
TensorHandle allreduce_async(const at::Tensor& tensor, const std::string& name = "",
                             const CollectiveOptions& options = {});
TensorHandle allreduce_async_(at::Tensor& tensor, const std::string& name = "",
                              const CollectiveOptions& options = {});
at::Tensor allreduce(const at::Tensor& tensor, const std::string& name = "",
                     const CollectiveOptions& options = {});
at::Tensor& allreduce_(at::Tensor& tensor, const std::string& name = "",
                       const CollectiveOptions& options = {});

// Concatenation along the first dimension, which may differ per rank (the others must
// agree). REQUIRES: tensor.dim() >= 1.
TensorHandle allgather_async(const at::Tensor& tensor, const std::string& name = "",
                             const CollectiveOptions& options = {});
at::Tensor allgather(const at::Tensor& tensor, const std::string& name = "",
                     const CollectiveOptions& options = {});

// root's tensor on every rank: a new tensor, or in place (`_`).
TensorHandle broadcast_async(const at::Tensor& tensor, int root, const std::string& name = "",
                             const CollectiveOptions& options = {});
TensorHandle broadcast_async_(at::Tensor& tensor, int root, const std::string& name = "",
                              const CollectiveOptions& options = {});
at::Tensor broadcast(const at::Tensor& tensor, int root, const std::string& name = "",
                     const CollectiveOptions& options = {});
at::Tensor& broadcast_(at::Tensor& tensor, int root, const std::string& name = "",
                       const CollectiveOptions& options = {});

// Rows [sum(splits[0..j)), +splits[j]) go to rank j; empty splits: even division of the
// first dimension. The result concatenates what each rank sent here.
TensorHandle alltoall_async(const at::Tensor& tensor, std::vector<int64_t> splits = {},
                            const std::string& name = "", const CollectiveOptions& options = {});
at::Tensor alltoall(const at::Tensor& tensor, std::vector<int64_t> splits = {},
                    const std::string& name = "", const CollectiveOptions& options = {});

// Reduces over ranks and keeps block `rank` of the first dimension (the first
// `dim0 % size` ranks get one more row).
TensorHandle reduce_scatter_async(const at::Tensor& tensor, const std::string& name = "",
                                  const CollectiveOptions& options = {});
at::Tensor reduce_scatter(const at::Tensor& tensor, const std::string& name = "",
                          const CollectiveOptions& options = {});

// Returns once every rank entered a barrier of this name.
void barrier(const std::string& name = "barrier", Engine* engine = nullptr);

// The average of a scalar over ranks (loss, accuracy ...), in double precision.
double metric_average(double value, const std::string& name, Engine* engine = nullptr);
// The sum of a scalar over ranks (sample counts ...), in double precision.
double metric_sum(double value, const std::string& name, Engine* engine = nullptr);

}  // namespace chorus
