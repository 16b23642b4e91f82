#include "engine/engine_loop.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>

#include "chorus/error.h"
#include "util/background_thread.h"
#include "util/log.h"

namespace chorus::engine {
namespace {

// Agreement vector layout (see engine_loop.h).
constexpr int kUncached = 0;
constexpr int kShutdown = 1;
constexpr int kStallAbort = 2;
constexpr int kHeader = 3;
// How often an idle engine joins a cycle when no work of its own arrives. Meanwhile a peer
// with work waits in the agreement allreduce, until this rank's work wakes it or the tick
// comes. Cycling every cycle_time while idle ran tens of empty allreduces per training
// step on the cores the model computes on; the tick keeps a peer's stall reports, its
// shutdown and the transport's liveness checks going.
constexpr auto kIdleTick = std::chrono::milliseconds(20);

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception of an unknown type";
  }
}

}  // namespace

struct Loop::Totals {
  std::vector<int32_t> v;
  int size, slots;
  int32_t at(int i) const { return v[i]; }
  bool joined(int r) const { return v[kHeader + r] > 0; }
  int32_t ready(int s) const { return v[kHeader + size + s]; }
  int32_t invalid(int s) const { return v[kHeader + size + slots + s]; }
};

Loop::Loop(Communicator& comm, const EngineOptions& options, Shared& shared)
    : comm_(comm),
      options_(options),
      shared_(shared),
      rank_(comm.rank()),
      size_(comm.size()),
      table_(comm.size(), options.join_mode),
      cache_(options.cache_capacity),
      executor_(comm, options, shared),
      stall_(options),
      joined_ranks_(comm.size(), false) {}

void Loop::run() noexcept {
  // Woken by every enqueue: it must not preempt the caller (util/background_thread.h).
  become_background_thread("chorus-engine");
  try {
    last_cycle_ = Clock::now();
    while (cycle()) {
    }
  } catch (...) {
    // The ranks may now be out of step: break the communicator so peers fail fast too, and
    // tell them why (a collective's failure told them already: the first reason stays).
    comm_.abort(message_of(std::current_exception()));
    stop(std::current_exception());
  }
}

bool Loop::cycle() {
  wait_for_work();
  bool fresh = drain();
  int slots = cache_.num_slots();
  Totals t{build_vector(), size_, slots};
  comm_.allreduce(t.v.data(), t.v.data(), t.v.size(), DataType::kInt32, ReduceOp::kSum);
  shared_.counters.cycles++;
  ++tick_;
  if (t.at(kShutdown) > 0) {
    stop(std::make_exception_ptr(IoError(detail::make_message(
        __FILE__, __LINE__, "engine shut down (requested by ", t.at(kShutdown), " rank(s))"))));
    return false;
  }
  if (t.at(kStallAbort) > 0) {
    auto waiting = table_.waiting(joined_ranks_, Clock::now());
    stop(std::make_exception_ptr(TimeoutError(stall_.shutdown_message(waiting))));
    return false;
  }
  std::vector<bool> joined_before = joined_ranks_;
  for (int r = 0; r < size_; ++r) joined_ranks_[r] = t.joined(r);
  any_joined_ = std::count(joined_ranks_.begin(), joined_ranks_.end(), true) > 0;
  std::vector<Response> plan;
  apply_cache(t, plan);
  size_t first_new = plan.size();
  if (t.at(kUncached) > 0) exchange();
  table_.take_ready(joined_ranks_, plan);
  remember(plan, first_new);
  progressed_ = fresh || !plan.empty() || t.at(kUncached) > 0;
  execute(plan);
  update_join(joined_before);
  if (rank_ == 0)
    stall_abort_ = stall_.check(table_.waiting(joined_ranks_, Clock::now()), shared_.counters);
  return true;
}

// When the next cycle starts:
// - idle (nothing in flight here, not joined): when work, a join or a shutdown arrives, or
//   after kIdleTick;
// - busy after a cycle that moved something (ops drained here, agreed, or announced by any
//   rank): at once, so that this rank already waits in the agreement allreduce when a
//   peer's matching op arrives, instead of keeping that peer waiting up to cycle_time;
// - busy after a cycle that moved nothing: cycle_time later (ranks stuck on ops that never
//   match then cycle at that pace instead of in a tight loop).
void Loop::wait_for_work() {
  std::unique_lock<std::mutex> lock(shared_.mu);
  bool idle = ops_.empty() && !joined_;
  Clock::duration gap = options_.cycle_time;
  if (idle) {
    gap = std::max<Clock::duration>(gap, kIdleTick);
  } else if (progressed_) {
    gap = Clock::duration::zero();
  }
  auto next = last_cycle_ + gap;
  shared_.wake.wait_until(lock, next, [&] {
    return shared_.shutdown_requested ||
           (idle && (!shared_.incoming.empty() || shared_.join_pending));
  });
  last_cycle_ = Clock::now();
}

bool Loop::drain() {
  std::vector<std::unique_ptr<LocalOp>> fresh;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    fresh.swap(shared_.incoming);
    if (shared_.join_pending) {
      joined_ = true;
      shared_.join_pending = false;
    }
    shutdown_ = shared_.shutdown_requested;
  }
  bool any = !fresh.empty();
  for (auto& op : fresh) classify(std::move(op));
  return any;
}

void Loop::classify(std::unique_ptr<LocalOp> op) {
  int slot = (cache_.enabled() && !any_joined_) ? cache_.find(op->request.name) : -1;
  if (slot >= 0 && cache_.matches(slot, op->request)) {
    op->state = OpState::kCached;
    op->slot = slot;
    op->cached_since = Clock::now();
  } else {
    if (slot >= 0) invalid_marks_.insert(slot);  // metadata changed: every rank drops it
    op->state = OpState::kUnannounced;
  }
  std::string name = op->request.name;
  ops_.emplace(std::move(name), std::move(op));
}

std::vector<int32_t> Loop::build_vector() {
  const int slots = cache_.num_slots();
  std::vector<int32_t> v(kHeader + size_ + 2 * slots, 0);
  auto now = Clock::now();
  auto limit = stall_.cache_wait_limit();
  for (auto& [name, op] : ops_) {
    if (op->state == OpState::kUnannounced) v[kUncached] = 1;
    // Waiting long on a bit: let a full negotiation find out which ranks are missing.
    if (op->state == OpState::kCached && now - op->cached_since > limit) {
      invalid_marks_.insert(op->slot);
    }
  }
  for (auto& [name, op] : ops_) {
    if (op->state == OpState::kCached && !invalid_marks_.count(op->slot)) {
      v[kHeader + size_ + op->slot] = 1;
    }
  }
  for (int s : invalid_marks_) v[kHeader + size_ + slots + s] = 1;
  invalid_marks_.clear();
  v[kShutdown] = shutdown_ ? 1 : 0;
  v[kStallAbort] = stall_abort_ ? 1 : 0;
  v[kHeader + rank_] = joined_ ? 1 : 0;
  return v;
}

// Drops invalidated slots; appends slots that every rank has ready (none while any rank
// has joined: joined ranks set no bits, and ops go through the table, which knows who
// contributed).
void Loop::apply_cache(const Totals& t, std::vector<Response>& plan) {
  for (int s = 0; s < t.slots; ++s) {
    if (t.invalid(s) > 0) drop_slot(s);
  }
  if (any_joined_) {
    for (auto& [name, op] : ops_) {
      if (op->state == OpState::kCached) op->state = OpState::kUnannounced;
    }
    return;
  }
  for (int s = 0; s < t.slots; ++s) {
    if (t.ready(s) == size_ && cache_.used(s)) {
      plan.push_back(cache_.response(s));
      cache_.touch(s, tick_);
    }
  }
}

void Loop::drop_slot(int slot) {
  if (!cache_.used(slot)) return;
  cache_.erase(slot);
  shared_.counters.cache_invalidations++;
  demote_slot(slot);
}

void Loop::demote_slot(int slot) {
  for (auto& [name, op] : ops_) {
    if (op->state == OpState::kCached && op->slot == slot) op->state = OpState::kUnannounced;
  }
}

void Loop::exchange() {
  std::vector<LocalOp*> mine;
  for (auto& [name, op] : ops_) {
    if (op->state == OpState::kUnannounced) mine.push_back(op.get());
  }
  std::sort(mine.begin(), mine.end(), [](LocalOp* a, LocalOp* b) { return a->seq < b->seq; });
  std::vector<const Request*> reqs;
  for (LocalOp* op : mine) {
    reqs.push_back(&op->request);
    op->state = OpState::kAnnounced;
  }
  std::string blob;
  encode_requests(reqs, blob);
  std::vector<int64_t> sizes(size_);
  int64_t my_size = static_cast<int64_t>(blob.size());
  comm_.allgather(&my_size, sizes.data(), 1, DataType::kInt64);
  std::vector<uint8_t> all(checked_message_total(sizes));
  std::vector<size_t> counts(sizes.begin(), sizes.end());
  comm_.allgatherv(blob.data(), all.data(), counts, DataType::kUInt8);
  shared_.counters.full_negotiations++;
  auto now = Clock::now();
  size_t off = 0;
  for (int r = 0; r < size_; ++r) {
    for (auto& req : decode_requests(all.data() + off, counts[r], r, size_))
      table_.add(r, std::move(req), now);
    off += counts[r];
  }
}

// Remembers the newly negotiated responses in the cache (every rank does the same puts in
// the same order). Not while ranks are joined: then the response does not hold what every
// rank would send.
void Loop::remember(const std::vector<Response>& plan, size_t first_new) {
  if (!cache_.enabled() || any_joined_) return;
  for (size_t i = first_new; i < plan.size(); ++i) {
    const Response& r = plan[i];
    if (!r.error.empty()) continue;
    auto it = ops_.find(r.name());
    if (it == ops_.end()) continue;  // cannot happen without joined ranks
    int old = cache_.find(r.name());
    if (old >= 0) drop_slot(old);
    int evicted = cache_.put(r, it->second->request, tick_);
    if (evicted >= 0) {
      shared_.counters.cache_invalidations++;
      demote_slot(evicted);
    }
  }
}

// A rank that has joined takes part in the others' ops without submitting them. Their
// generated names ("<prefix>.noname.<n>") count for it too, so that its next unnamed op is
// named as theirs are: otherwise every unnamed op after a join would pair with nothing.
void Loop::count_unnamed(const std::string& name) {
  auto at = name.rfind(".noname.");
  if (at == std::string::npos) return;
  uint64_t n = 0;
  const char* p = name.c_str() + at + 8;
  if (*p == '\0') return;
  for (; *p; ++p) {
    if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10) return;
    n = n * 10 + static_cast<uint64_t>(*p - '0');
  }
  uint64_t seen = shared_.unnamed.load();
  while (seen <= n && !shared_.unnamed.compare_exchange_weak(seen, n + 1)) {
  }
}

void Loop::execute(const std::vector<Response>& plan) {
  if (plan.empty()) return;
  for (const Response& r : plan) {
    if (!ops_.count(r.name())) count_unnamed(r.name());
  }
  auto find = [this](const std::string& name) -> LocalOp* {
    auto it = ops_.find(name);
    return it == ops_.end() ? nullptr : it->second.get();
  };
  auto done = [this](const std::string& name, std::exception_ptr error) {
    auto it = ops_.find(name);
    if (it == ops_.end()) return;
    LocalOp& op = *it->second;
    if (!error && (op.request.op == OpType::kAllreduce || op.request.op == OpType::kBroadcast)) {
      op.handle->data = op.output;
      op.handle->bytes = op.request.bytes();
      op.handle->shape = op.request.shape;
    }
    if (op.state == OpState::kCached) shared_.counters.cache_hits++;
    shared_.counters.ops++;
    shared_.counters.op_bytes += op.request.bytes();
    // Moved, so the waiter holds the last reference and frees the exception on its own
    // thread (the refcount lives in uninstrumented libstdc++, invisible to TSan).
    shared_.complete(op, std::move(error));
    ops_.erase(it);
  };
  executor_.run(plan, Clock::now(), find, done);
}

// When every rank has joined, each rank's join() returns the last rank to join (the
// highest of those that joined in the final cycle) and joined state resets everywhere.
void Loop::update_join(const std::vector<bool>& joined_before) {
  if (std::count(joined_ranks_.begin(), joined_ranks_.end(), true) < size_) return;
  int last = -1;
  for (int r = 0; r < size_; ++r) {
    if (!joined_before[r]) last = r;
  }
  std::shared_ptr<HandleState> handle;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    handle = std::move(shared_.join_handle);
    shared_.join_active = false;
  }
  joined_ = false;
  std::fill(joined_ranks_.begin(), joined_ranks_.end(), false);
  any_joined_ = false;
  if (handle) {
    handle->value = last;
    handle->finish(nullptr);
  }
}

// Fails every op on this rank (pending and not yet drained) and any join with `error`;
// later enqueues fail with it too.
void Loop::stop(std::exception_ptr error) {
  std::vector<std::unique_ptr<LocalOp>> fresh;
  std::shared_ptr<HandleState> join;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.stopped = error;
    fresh.swap(shared_.incoming);
    join = std::move(shared_.join_handle);
    shared_.join_active = false;
  }
  for (auto& op : fresh) shared_.complete(*op, error);
  for (auto& [name, op] : ops_) shared_.complete(*op, error);
  ops_.clear();
  if (join) join->finish(error);
  CHORUS_LOG(kInfo, "engine") << "rank " << rank_ << " stopped: " << message_of(error);
}

}  // namespace chorus::engine
