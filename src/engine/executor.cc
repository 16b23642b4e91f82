#include "engine/executor.h"

#include <algorithm>
#include <cstring>

#include "chorus/error.h"
#include "engine/scale.h"
#include "util/reduce.h"

namespace chorus::engine {
namespace {

bool fusible(const Response& a, const Response& b) {
  return b.error.empty() && b.agreed.op == OpType::kAllreduce && a.agreed.dtype == b.agreed.dtype &&
         a.agreed.reduce == b.agreed.reduce && a.agreed.prescale == b.agreed.prescale &&
         a.agreed.postscale == b.agreed.postscale && a.contributors == b.contributors &&
         a.divisor == b.divisor;
}

const char* collective_phase(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "ALLREDUCE";
    case OpType::kAllgather:
      return "ALLGATHER";
    case OpType::kBroadcast:
      return "BROADCAST";
    case OpType::kAlltoall:
      return "ALLTOALL";
    case OpType::kReduceScatter:
      return "REDUCE_SCATTER";
    case OpType::kBarrier:
      return "BARRIER";
    case OpType::kAllocShared:
      return "ALLOC_SHARED";
  }
  return "?";
}

}  // namespace

void Executor::run(const std::vector<Response>& plan, Clock::time_point planned, const Find& find,
                   const Done& done) {
  planned_ = planned;
  std::vector<bool> taken(plan.size(), false);
  for (size_t i = 0; i < plan.size(); ++i) {
    if (taken[i]) continue;
    const Response& r = plan[i];
    if (!r.error.empty()) {
      taken[i] = true;
      done(r.name(), std::make_exception_ptr(InvalidArgument(r.error)));
      continue;
    }
    if (r.agreed.op != OpType::kAllreduce) {
      taken[i] = true;
      run_other(r, find(r.name()));
      done(r.name(), nullptr);
      continue;
    }
    auto group = take_group(plan, i, taken);
    std::vector<LocalOp*> ops;
    for (const Response* g : group) ops.push_back(find(g->name()));
    if (group.size() == 1) {
      allreduce_one(r, ops[0]);
    } else {
      allreduce_fused(group, ops);
    }
    for (const Response* g : group) done(g->name(), nullptr);
  }
}

// plan[first] and the later untaken allreduces compatible with it, in plan order, while
// they fit the fusion threshold. Every rank has the same plan, so the same groups.
// A tensor in shared memory on every rank runs alone: the shared-memory allreduce takes
// one buffer, and beats any group's path.
std::vector<const Response*> Executor::take_group(const std::vector<Response>& plan, size_t first,
                                                  std::vector<bool>& taken) const {
  std::vector<const Response*> group{&plan[first]};
  taken[first] = true;
  if (plan[first].agreed.in_shared_memory) return group;
  bool in_place = in_place_group(plan[first]);
  size_t bytes = plan[first].agreed.bytes(), limit = group_limit(in_place);
  if (!worth_fusing(bytes, in_place)) return group;
  for (size_t j = first + 1; j < plan.size(); ++j) {
    if (taken[j] || plan[j].agreed.in_shared_memory || !fusible(plan[first], plan[j])) continue;
    size_t b = plan[j].agreed.bytes();
    if (!worth_fusing(b, in_place) || bytes + b > limit) continue;
    bytes += b;
    taken[j] = true;
    group.push_back(&plan[j]);
  }
  return group;
}

// Copying a tensor into the buffer and out again (two memory passes) pays only while it
// costs less than the fixed cost of the tensor's own collective; a larger one runs alone,
// in place. A group reduced in place copies nothing, so every tensor that fits is worth it.
bool Executor::worth_fusing(size_t bytes, bool in_place) const {
  return in_place || bytes < std::min(options_.fusion_threshold / 4, kStagedAloneBytes);
}

// Without a buffer to fill, a group costs no copies and no memory, so it may be as large
// as Horovod's buffers: fewer, larger collectives (docs/engine.md). A threshold of 0 still
// turns fusion off.
size_t Executor::group_limit(bool in_place) const {
  size_t t = options_.fusion_threshold;
  return in_place && t > 0 ? std::max(t, kInPlaceGroupBytes) : t;
}

// Results that need no work after the reduction, and a communicator that reads parts where
// they lie. Only agreed data decides (not whether this rank has the ops), so every rank runs
// the same collective (and asks the communicator at the same point).
bool Executor::in_place_group(const Response& first) const {
  const Request& a = first.agreed;
  bool plain = a.prescale == 1.0 &&
               (averaged_by_comm(first) || (a.reduce != ReduceOp::kAverage && a.postscale == 1.0));
  return plain && comm_.allreduce_reads_parts_in_place();
}

// The communicator averages over every rank, dividing as it writes the result; the engine
// lets it when the average is over every rank (joined ranks add zeros) and no postscale
// follows, which saves a pass over the output. Otherwise (JoinMode::kContribute with ranks
// joined: the average is over the contributors) the communicator sums and
// finish_reduction divides.
bool Executor::averaged_by_comm(const Response& r) const {
  return r.agreed.reduce == ReduceOp::kAverage && r.divisor == comm_.size() &&
         r.agreed.postscale == 1.0;
}

ReduceOp Executor::comm_op(const Response& r) const {
  if (r.agreed.reduce != ReduceOp::kAverage || averaged_by_comm(r)) return r.agreed.reduce;
  return ReduceOp::kSum;
}

double Executor::post_factor(const Response& r) {
  double f = r.agreed.postscale;
  if (r.agreed.reduce == ReduceOp::kAverage && is_floating_point(r.agreed.dtype)) f /= r.divisor;
  return f;
}

void Executor::finish_reduction(const Response& r, void* dst, const void* src, size_t count) const {
  if (averaged_by_comm(r)) {
    if (dst != src) std::memcpy(dst, src, count * dtype_size(r.agreed.dtype));
    return;
  }
  scale_copy(r.agreed.dtype, dst, src, count, post_factor(r));
  if (r.agreed.reduce == ReduceOp::kAverage && !is_floating_point(r.agreed.dtype)) {
    divide(r.agreed.dtype, dst, count, r.divisor);
  }
}

void* Executor::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  std::memset(scratch_.data(), 0, bytes);
  return scratch_.data();
}

void Executor::trace(const Response& r, LocalOp* op, const char* phase, Clock::time_point begin,
                     Clock::time_point end) {
  if (op == nullptr || !shared_.timeline.active()) return;
  if (phase == nullptr) {  // the start of the op: its negotiation and queueing
    shared_.timeline.span(r.name(), "NEGOTIATE", op->enqueued, planned_);
    shared_.timeline.span(r.name(), "QUEUE", planned_, begin);
    return;
  }
  bool collective = std::strncmp(phase, "MEMCPY", 6) != 0;
  shared_.timeline.span(r.name(), phase, begin, end, collective ? comm_.last_plan() : nullptr);
}

void Executor::allreduce_one(const Response& r, LocalOp* op) {
  const Request& a = r.agreed;
  size_t n = static_cast<size_t>(a.elements());
  auto t0 = Clock::now();
  trace(r, op, nullptr, t0, t0);
  void* out = op ? op->output : scratch(a.bytes());
  const void* in = op ? op->input : out;
  if (a.prescale != 1.0) {
    scale_copy(a.dtype, out, in, n, a.prescale);
    in = out;
  }
  comm_.allreduce(in, out, n, a.dtype, comm_op(r));
  finish_reduction(r, out, out, n);
  shared_.counters.collectives++;
  trace(r, op, collective_phase(a.op), t0, Clock::now());
}

// A rank without the op (it joined) lends zeros from scratch, a region per tensor: the
// peers read each region's result back while the ring runs.
void Executor::allreduce_parts(const std::vector<const Response*>& group,
                               const std::vector<LocalOp*>& ops) {
  auto t0 = Clock::now();
  size_t missing = 0;
  for (size_t i = 0; i < group.size(); ++i) missing += ops[i] ? 0 : group[i]->agreed.bytes();
  char* zeros = missing > 0 ? static_cast<char*>(scratch(missing)) : nullptr;
  parts_.clear();
  for (size_t i = 0; i < group.size(); ++i) {
    trace(*group[i], ops[i], nullptr, t0, t0);
    auto count = static_cast<size_t>(group[i]->agreed.elements());
    if (ops[i]) {
      parts_.push_back({ops[i]->input, ops[i]->output, count});
    } else {
      parts_.push_back({zeros, zeros, count});
      zeros += group[i]->agreed.bytes();
    }
  }
  comm_.allreduce(parts_, group[0]->agreed.dtype, comm_op(*group[0]));
  auto t1 = Clock::now();
  for (size_t i = 0; i < group.size(); ++i) trace(*group[i], ops[i], "ALLREDUCE", t0, t1);
  shared_.counters.collectives++;
  shared_.counters.fused_tensors += group.size();
  shared_.counters.fused_in_place += group.size();
}

void Executor::allreduce_fused(const std::vector<const Response*>& group,
                               const std::vector<LocalOp*>& ops) {
  if (in_place_group(*group[0])) return allreduce_parts(group, ops);
  const Request& a = group[0]->agreed;
  size_t es = dtype_size(a.dtype), total = 0;
  for (const Response* r : group) total += r->agreed.bytes();
  if (fusion_.size() < total) fusion_.resize(total);
  auto t0 = Clock::now();
  size_t off = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    trace(*group[i], ops[i], nullptr, t0, t0);
    size_t b = group[i]->agreed.bytes();
    if (ops[i]) {
      scale_copy(a.dtype, fusion_.data() + off, ops[i]->input, b / es, a.prescale);
    } else {
      std::memset(fusion_.data() + off, 0, b);
    }
    off += b;
  }
  auto t1 = Clock::now();
  // fusible(): one comm_op for the whole group
  if (a.reduce == ReduceOp::kAdasum) {  // each tensor a vector of its own: parts of the buffer
    parts_.clear();
    off = 0;
    for (const Response* r : group) {
      parts_.push_back({fusion_.data() + off, fusion_.data() + off, r->agreed.bytes() / es});
      off += r->agreed.bytes();
    }
    comm_.allreduce(parts_, a.dtype, ReduceOp::kAdasum);
  } else {
    comm_.allreduce(fusion_.data(), fusion_.data(), total / es, a.dtype, comm_op(*group[0]));
  }
  auto t2 = Clock::now();
  off = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    size_t b = group[i]->agreed.bytes();
    if (ops[i]) finish_reduction(*group[i], ops[i]->output, fusion_.data() + off, b / es);
    off += b;
  }
  auto t3 = Clock::now();
  for (size_t i = 0; i < group.size(); ++i) {
    trace(*group[i], ops[i], "MEMCPY_IN_FUSION_BUFFER", t0, t1);
    trace(*group[i], ops[i], "ALLREDUCE", t1, t2);
    trace(*group[i], ops[i], "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
  }
  shared_.counters.collectives++;
  shared_.counters.fused_tensors += group.size();
}

void Executor::run_other(const Response& r, LocalOp* op) {
  auto t0 = Clock::now();
  trace(r, op, nullptr, t0, t0);
  switch (r.agreed.op) {
    case OpType::kAllgather:
      allgather(r, op);
      break;
    case OpType::kBroadcast:
      broadcast(r, op);
      break;
    case OpType::kAlltoall:
      alltoall(r, op);
      break;
    case OpType::kReduceScatter:
      reduce_scatter(r, op);
      break;
    case OpType::kBarrier:
      comm_.barrier();
      break;
    case OpType::kAllocShared: {  // a joined rank takes part and drops its memory
      SharedBuffer memory = comm_.alloc_shared(static_cast<size_t>(r.agreed.elements()));
      if (op) op->handle->shared_buffer = std::move(memory);
      break;
    }
    case OpType::kAllreduce:
      break;  // handled by run()
  }
  shared_.counters.collectives++;
  trace(r, op, collective_phase(r.agreed.op), t0, Clock::now());
}

}  // namespace chorus::engine
