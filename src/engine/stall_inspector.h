// The stall inspector: names tensors that some ranks submitted and others did not.
//
// Only rank 0 decides (from its copy of the message table and its own clock): it logs a
// warning once per stalled tensor after CHORUS_STALL_CHECK_SECONDS, and after
// CHORUS_STALL_SHUTDOWN_SECONDS asks, through the next cycle's agreement vector, that every
// rank stop. Each rank then writes the same message from its identical table.
//
// Thread safety: engine thread only.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "chorus/engine.h"
#include "engine/message_table.h"
#include "engine/shared_state.h"

namespace chorus::engine {

class StallInspector {
 public:
  explicit StallInspector(const EngineOptions& options) : options_(options) {}

  // Warns about entries waiting longer than the check interval (once each). Returns
  // whether the shutdown interval has passed for any of them.
  bool check(const std::vector<MessageTable::Waiting>& waiting, Counters& counters);

  // How long a rank may wait on a response-cache bit before it moves the op to a full
  // negotiation (so that the table, and this inspector, learn which ranks are missing).
  Clock::duration cache_wait_limit() const;

  // The error every rank's pending handles get when the stall shutdown fires.
  std::string shutdown_message(const std::vector<MessageTable::Waiting>& waiting) const;

 private:
  const EngineOptions& options_;
  std::set<std::string> warned_;
};

// "tensor 'a' (allreduce) submitted by ranks [0, 2], missing ranks [1]"
std::string describe(const MessageTable::Waiting& w);

}  // namespace chorus::engine
