// The ops a Python program has submitted and not yet synchronized, by integer handle (what
// Horovod's hvd.poll() and hvd.synchronize() take).
//
// A name is taken from submission until its handle is synchronized: a second op under the
// same name before that is a ValueError on the spot, whatever the timing, as in Horovod
// ("two concurrent operations with the same name"). One exception: an op that finished is
// forgotten by name once the program synchronized an op submitted after it (a barrier,
// say): it has moved on, and Horovod's own tests leave such handles behind when no shutdown
// separates them (as under mpirun).
//
// Thread safety: every method may be called from any thread (DistributedOptimizer's hooks
// submit from autograd's thread while the training thread synchronizes).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chorus/engine.h"
#include "chorus/torch/tensor_ops.h"

namespace chorus::python {

struct PendingOp {
  enum class Kind {
    kTensor,    // result: one tensor
    kGroup,     // result: a list of tensors
    kAlltoall,  // result: (tensor, received splits as an int32 tensor)
    kBarrier,   // result: None
    kJoin,      // result: the last rank to join
  };
  Kind kind = Kind::kTensor;
  std::vector<TensorHandle> tensors;  // kTensor, kGroup, kAlltoall
  Handle handle;                      // kBarrier, kJoin
  // The process set's engine stays alive while its ops are pending.
  std::shared_ptr<ProcessSet> set;
  int set_id = 0;
  std::vector<std::string> names;  // the names it holds (given ones; unnamed ops hold none)

  // Whether every part finished (successfully or not); never blocks.
  bool poll() const;
  // Waits up to `timeout` for every part; whether all finished.
  bool wait_for(std::chrono::milliseconds timeout) const;
};

class PendingOps {
 public:
  // Takes `names` on process set `set_id` for an op about to be submitted. InvalidArgument
  // (nothing taken) when one is held by an op not yet synchronized (see above).
  void reserve(int set_id, const std::vector<std::string>& names);
  // Gives back names reserved for an op whose submission failed.
  void release(int set_id, const std::vector<std::string>& names);
  // Records a submitted op (its names reserved) and returns its handle.
  int64_t add(PendingOp op);
  // nullptr when unknown (never submitted, or already synchronized).
  std::shared_ptr<PendingOp> find(int64_t id) const;
  // Forgets a synchronized op and frees its names.
  void erase(int64_t id);
  // Forgets everything (shutdown: the engine failed what was pending).
  void clear();

 private:
  mutable std::mutex mu_;
  int64_t next_ = 0;
  std::map<int64_t, std::shared_ptr<PendingOp>> ops_;
  // Who holds each (set, name): an op's id, or kReserved between reserve() and add().
  static constexpr int64_t kReserved = -1;
  std::map<std::pair<int, std::string>, int64_t> names_;
  // Whether the op holding a name finished and a later one was synchronized since.
  bool holder_passed(int64_t holder) const;
  int64_t last_synchronized_ = -1;  // the highest id erase() was given
};

PendingOps& pending_ops();

}  // namespace chorus::python
