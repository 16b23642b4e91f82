// State shared by the callers' threads and the engine thread.
//
// Lock order: Shared::mu, then a HandleState::mu (finish() is called without Shared::mu).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "chorus/engine.h"
#include "engine/handle_state.h"
#include "engine/timeline.h"

namespace chorus::engine {

struct Counters {
  std::atomic<uint64_t> cycles{0};
  std::atomic<uint64_t> full_negotiations{0};
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_invalidations{0};
  std::atomic<uint64_t> collectives{0};
  std::atomic<uint64_t> fused_tensors{0};
  std::atomic<uint64_t> fused_in_place{0};
  std::atomic<uint64_t> stall_warnings{0};
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> op_bytes{0};

  EngineStats snapshot() const;
};

struct Shared {
  std::mutex mu;
  std::condition_variable wake;  // the engine thread waits on it between cycles

  // Guarded by mu.
  std::vector<std::unique_ptr<LocalOp>> incoming;  // enqueued, not yet seen by the engine
  std::unordered_set<std::string> in_flight;       // names enqueued and not finished
  uint64_t next_seq = 0;
  // Not guarded: Engine::unnamed's count, which the engine thread also raises (see
  // Loop::count_unnamed).
  std::atomic<uint64_t> unnamed{0};
  bool shutdown_requested = false;
  bool join_active = false;   // join() called on this rank and not finished
  bool join_pending = false;  // join() called, not yet seen by the engine thread
  std::shared_ptr<HandleState> join_handle;
  std::exception_ptr stopped;  // set once the engine thread has stopped

  Counters counters;
  Timeline timeline;

  // Frees the op's name, then finishes its handle (so a caller woken by the handle may
  // enqueue the same name again at once).
  void complete(LocalOp& op, std::exception_ptr error);
};

}  // namespace chorus::engine
