// The engine thread: one negotiation per cycle, then the agreed ops.
//
// A cycle, identical in structure on every rank:
//  1. Take newly enqueued ops; an op whose name and metadata match a response-cache slot
//     waits on that slot's bit, any other op is to be announced.
//  2. One int32 sum-allreduce of the agreement vector:
//       [uncached, shutdown, stall-abort | joined flag per rank | ready bit per cache slot |
//        invalidate bit per cache slot]
//     Every rank learns the same totals, so every decision below is the same everywhere.
//  3. Invalidated slots are dropped (their waiting ops go to a full negotiation); slots
//     ready on every rank form the cached part of the plan, in slot order.
//  4. If any rank had unannounced ops: full negotiation — allgather of message sizes and
//     allgatherv of the encoded requests, applied in rank order to the message table;
//     entries every rank has submitted (or joined) join the plan in announcement order.
//  5. The executor runs the plan (fusing allreduces); handles finish.
//
// Thread safety: run() is the thread body; nothing here is touched by other threads
// except through Shared.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/engine.h"
#include "engine/executor.h"
#include "engine/message_table.h"
#include "engine/response_cache.h"
#include "engine/shared_state.h"
#include "engine/stall_inspector.h"

namespace chorus::engine {

class Loop {
 public:
  Loop(Communicator& comm, const EngineOptions& options, Shared& shared);
  // The thread body: cycles until shutdown or an error; never throws.
  void run() noexcept;

 private:
  struct Totals;  // the agreement vector, summed over ranks

  bool cycle();
  void wait_for_work();
  bool drain();  // takes the newly enqueued ops; true if there were any
  void classify(std::unique_ptr<LocalOp> op);
  std::vector<int32_t> build_vector();
  void apply_cache(const Totals& t, std::vector<Response>& plan);
  void exchange();
  void remember(const std::vector<Response>& plan, size_t first_new);
  void execute(const std::vector<Response>& plan);
  void count_unnamed(const std::string& name);
  void update_join(const std::vector<bool>& joined_before);
  void drop_slot(int slot);
  void demote_slot(int slot);
  void stop(std::exception_ptr error);

  Communicator& comm_;
  const EngineOptions& options_;
  Shared& shared_;
  const int rank_, size_;

  std::unordered_map<std::string, std::unique_ptr<LocalOp>> ops_;
  MessageTable table_;
  ResponseCache cache_;
  Executor executor_;
  StallInspector stall_;

  std::set<int> invalid_marks_;     // slots to invalidate in the next vector
  bool joined_ = false;             // this rank has joined
  bool progressed_ = false;         // the last cycle drained, agreed or announced ops
  bool shutdown_ = false;           // this rank asks for shutdown
  bool stall_abort_ = false;        // rank 0 asks every rank to stop (stall shutdown)
  std::vector<bool> joined_ranks_;  // as of the last cycle, the same on every rank
  bool any_joined_ = false;
  uint64_t tick_ = 0;
  Clock::time_point last_cycle_;
};

}  // namespace chorus::engine
