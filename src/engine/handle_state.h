// The state behind a Handle, shared by the caller's copies and the engine thread, and the
// engine thread's record of one local operation.
//
// The engine thread fills the result fields, then calls finish(); callers read them only
// after wait() has seen `done` under the lock, which orders the writes before the reads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "chorus/shared_buffer.h"
#include "engine/request.h"
#include "util/deadline.h"

namespace chorus {

struct HandleState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;         // guarded by mu
  std::exception_ptr error;  // guarded by mu

  // Results, written by the engine thread before finish().
  const void* data = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> received_splits;
  std::vector<uint8_t> owned;  // engine-allocated output (allgather, alltoall, ...)
  int64_t value = -1;          // join: the last rank to join
  SharedBuffer shared_buffer;  // alloc_shared

  // Marks the op finished (with `e`, or successfully when null) and wakes waiters.
  void finish(std::exception_ptr e);
};

namespace engine {

// Where a local op stands in negotiation.
enum class OpState {
  kUnannounced,  // to be sent in the next full negotiation
  kAnnounced,    // every rank has its request in the message table
  kCached,       // agreed through the response cache slot `slot`
};

// One op enqueued on this rank, owned by the engine thread once drained.
struct LocalOp {
  Request request;
  const void* input = nullptr;
  void* output = nullptr;
  std::shared_ptr<HandleState> handle;
  OpState state = OpState::kUnannounced;
  int slot = -1;
  uint64_t seq = 0;  // enqueue order on this rank: announcements keep it
  Clock::time_point enqueued;
  Clock::time_point cached_since;  // when it started waiting on a cache bit
};

}  // namespace engine
}  // namespace chorus
