// The process sets of one engine (Engine::add_process_set): which exist, and the engines of
// those this rank belongs to. Every rank keeps the same table: sets are added and removed
// only by calls that every rank makes in the same order, each agreed through an allgather
// on the parent engine before anything changes.
//
// `parent` is the engine that owns the table: it runs the agreements.
// Thread safety: add() and remove() by one thread at a time (the engine's contract);
// find(), all() and retire_all() from any thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/engine.h"

namespace chorus::engine {

class ProcessSetTable {
 public:
  // `comm` (the parent's communicator) is split for the members.
  ProcessSetTable(Communicator& comm, const EngineOptions& options);

  std::shared_ptr<ProcessSet> add(Engine& parent, std::vector<int> ranks);
  void remove(Engine& parent, int id);
  std::shared_ptr<ProcessSet> find(Engine& parent, int id) const;
  std::vector<std::shared_ptr<ProcessSet>> all(Engine& parent) const;
  // Shuts every set's engine down (the parent is shutting down). Idempotent.
  void retire_all();

 private:
  // Every rank's row of an agreement allgather: `mine` padded to a fixed width.
  std::vector<std::vector<int32_t>> gather(Engine& parent, const std::vector<int32_t>& mine);
  std::shared_ptr<ProcessSet> whole_group(Engine& parent) const;

  Communicator& comm_;
  EngineOptions child_options_;
  mutable std::mutex mu_;                            // guards sets_
  std::map<int, std::shared_ptr<ProcessSet>> sets_;  // id > 0
  int next_id_ = 1;
  uint64_t agreements_ = 0;  // names the agreement ops; the same count on every rank
};

}  // namespace chorus::engine
