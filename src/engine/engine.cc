// Engine's public surface: options, start/shutdown, argument checks at enqueue, join,
// timeline control. The cycle itself is in engine_loop.cc.
#include "chorus/engine.h"

#include <numeric>
#include <thread>

#include "chorus/error.h"
#include "engine/engine_impl.h"
#include "util/env.h"

namespace chorus {

const char* op_type_name(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kAllocShared:
      return "alloc_shared";
  }
  return "unknown";
}

namespace {

std::chrono::milliseconds seconds_env(const char* name, double fallback) {
  double s = env_double_or(name, fallback);
  CHORUS_CHECK_ARG(s >= 0, name, " must be >= 0, got ", s);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

}  // namespace

EngineOptions EngineOptions::from_env() {
  EngineOptions o;
  double cycle_ms = env_double_or("CHORUS_CYCLE_TIME_MS", 1.0);
  CHORUS_CHECK_ARG(cycle_ms >= 0, "CHORUS_CYCLE_TIME_MS must be >= 0, got ", cycle_ms);
  o.cycle_time = std::chrono::microseconds(static_cast<int64_t>(cycle_ms * 1000.0));
  int64_t fusion = env_int_or("CHORUS_FUSION_THRESHOLD", static_cast<int64_t>(o.fusion_threshold));
  CHORUS_CHECK_ARG(fusion >= 0, "CHORUS_FUSION_THRESHOLD must be >= 0, got ", fusion);
  o.fusion_threshold = static_cast<size_t>(fusion);
  int64_t cache = env_int_or("CHORUS_CACHE_CAPACITY", o.cache_capacity);
  CHORUS_CHECK_ARG(cache >= 0 && cache <= (1 << 20), "CHORUS_CACHE_CAPACITY out of range: ", cache);
  o.cache_capacity = static_cast<int>(cache);
  o.stall_check = seconds_env("CHORUS_STALL_CHECK_SECONDS", 60.0);
  o.stall_shutdown = seconds_env("CHORUS_STALL_SHUTDOWN_SECONDS", 0.0);
  o.timeline_path = env_string("CHORUS_TIMELINE").value_or("");
  return o;
}

namespace engine {

EngineStats Counters::snapshot() const {
  EngineStats s;
  s.cycles = cycles.load();
  s.full_negotiations = full_negotiations.load();
  s.cache_hits = cache_hits.load();
  s.cache_invalidations = cache_invalidations.load();
  s.collectives = collectives.load();
  s.fused_tensors = fused_tensors.load();
  s.fused_in_place = fused_in_place.load();
  s.stall_warnings = stall_warnings.load();
  s.ops = ops.load();
  s.op_bytes = op_bytes.load();
  return s;
}

void Shared::complete(LocalOp& op, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu);
    in_flight.erase(op.request.name);
  }
  op.handle->finish(std::move(error));
}

}  // namespace engine

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Engine> Engine::start(std::unique_ptr<Communicator> comm, EngineOptions options) {
  CHORUS_CHECK_ARG(comm != nullptr, "Engine::start: null communicator");
  Communicator& c = *comm;
  auto impl = std::make_unique<Impl>(std::move(comm), c, std::move(options));
  if (!impl->options.timeline_path.empty() && c.rank() == 0) {
    impl->shared.timeline.start(impl->options.timeline_path);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->loop.run(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::unique_ptr<Engine> Engine::start(Communicator& comm, EngineOptions options) {
  auto impl = std::make_unique<Impl>(nullptr, comm, std::move(options));
  if (!impl->options.timeline_path.empty() && comm.rank() == 0) {
    impl->shared.timeline.start(impl->options.timeline_path);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->loop.run(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  impl_->sets.retire_all();
  {
    std::lock_guard<std::mutex> lock(impl_->shared.mu);
    impl_->shared.shutdown_requested = true;
  }
  impl_->shared.wake.notify_all();
  std::lock_guard<std::mutex> lock(impl_->thread_mu);
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->shared.timeline.stop();
}

int Engine::rank() const { return impl_->comm.rank(); }
int Engine::size() const { return impl_->comm.size(); }
EngineStats Engine::stats() const {
  EngineStats s = impl_->shared.counters.snapshot();
  s.shared_memory = impl_->comm.shared_memory_allreduces();
  return s;
}
void Engine::start_timeline(const std::string& path) { impl_->shared.timeline.start(path); }
void Engine::stop_timeline() { impl_->shared.timeline.stop(); }

int Engine::join(std::chrono::milliseconds timeout) {
  Handle h = join_async();
  h.wait(timeout);
  return h.last_joined_rank();
}

Handle Engine::join_async() {
  auto handle = std::make_shared<HandleState>();
  {
    std::lock_guard<std::mutex> lock(impl_->shared.mu);
    if (impl_->shared.stopped) std::rethrow_exception(impl_->shared.stopped);
    CHORUS_CHECK_ARG(!impl_->shared.shutdown_requested, "join: the engine is shut down");
    CHORUS_CHECK_ARG(!impl_->shared.join_active, "join: this rank has already joined");
    impl_->shared.join_active = true;
    impl_->shared.join_pending = true;
    impl_->shared.join_handle = handle;
  }
  impl_->shared.wake.notify_all();
  return Handle(handle);
}

}  // namespace chorus
