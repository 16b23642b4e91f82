// Runs an agreed plan on the communicator, in plan order on every rank: allreduces are
// grouped (same dtype, reduce op and scale factors, up to the fusion threshold) and run as
// one collective: over the tensors where they lie when the communicator reads peers'
// memory directly (single copy), else through the persistent fusion buffer; other ops run
// one by one.
// A rank without a local op for a response (it joined) contributes zeros / no rows.
//
// Exceptions from the communicator propagate to the caller (the loop stops the engine).
// Thread safety: engine thread only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/engine.h"
#include "engine/response.h"
#include "engine/shared_state.h"

namespace chorus::engine {

class Executor {
 public:
  // The local op for a name, or nullptr (this rank joined).
  using Find = std::function<LocalOp*(const std::string&)>;
  // Called once per response, after its output is written (error: null on success).
  using Done = std::function<void(const std::string&, std::exception_ptr)>;

  Executor(Communicator& comm, const EngineOptions& options, Shared& shared)
      : comm_(comm), options_(options), shared_(shared) {}

  // `planned`: when the plan was agreed (the end of NEGOTIATE in the timeline).
  void run(const std::vector<Response>& plan, Clock::time_point planned, const Find& find,
           const Done& done);

 private:
  std::vector<const Response*> take_group(const std::vector<Response>& plan, size_t first,
                                          std::vector<bool>& taken) const;
  bool worth_fusing(size_t bytes, bool in_place) const;
  size_t group_limit(bool in_place) const;  // the most bytes of one group
  static constexpr size_t kInPlaceGroupBytes = size_t{128} << 20;
  // From this size a tensor runs alone rather than through the fusion buffer: copying
  // 128 KiB in and out (tens of microseconds) costs about what sharing a collective saves
  // on loopback TCP (docs/engine.md, "Fusion"); across hosts a collective costs more.
  static constexpr size_t kStagedAloneBytes = size_t{128} << 10;
  // A group (starting with `first`) reduced by the communicator where its tensors lie
  // (Communicator::allreduce over parts) instead of through the fusion buffer.
  bool in_place_group(const Response& first) const;
  void allreduce_one(const Response& r, LocalOp* op);
  void allreduce_fused(const std::vector<const Response*>& group, const std::vector<LocalOp*>& ops);
  void allreduce_parts(const std::vector<const Response*>& group, const std::vector<LocalOp*>& ops);
  void run_other(const Response& r, LocalOp* op);
  void allgather(const Response& r, LocalOp* op);
  void broadcast(const Response& r, LocalOp* op);
  void alltoall(const Response& r, LocalOp* op);
  void reduce_scatter(const Response& r, LocalOp* op);

  bool averaged_by_comm(const Response& r) const;
  ReduceOp comm_op(const Response& r) const;  // what the communicator is asked to do
  // The factor applied after the reduction (postscale, and 1/divisor for an average
  // of floating-point values), and the integer divisor for an integer average (or 1).
  static double post_factor(const Response& r);
  void finish_reduction(const Response& r, void* dst, const void* src, size_t count) const;
  void* scratch(size_t bytes);
  void trace(const Response& r, LocalOp* op, const char* phase, Clock::time_point begin,
             Clock::time_point end);

  Communicator& comm_;
  const EngineOptions& options_;
  Shared& shared_;
  Clock::time_point planned_;
  std::vector<uint8_t> fusion_;   // persistent fusion buffer, grown up to the threshold
  std::vector<uint8_t> scratch_;  // zeros / receive space for ranks without a local op
  std::vector<BufferPart> parts_;
};

}  // namespace chorus::engine
