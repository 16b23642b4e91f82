// The process-wide runtime (include/chorus/torch/runtime.h): Job + Engine behind a mutex.
// No libtorch in this file.
#include "chorus/torch/runtime.h"

#include <mutex>

#include "chorus/error.h"
#include "chorus/job.h"
#include "torch/shared_heap.h"
#include "util/log.h"
#include "util/malloc_tuning.h"

namespace chorus {
namespace {

struct Runtime {
  std::mutex mu;
  // Outlives engine: the engine runs on job->world(). Kept after shutdown() (disconnected),
  // so that a second init() forms a new world over the same store connection.
  std::unique_ptr<Job> job;
  std::unique_ptr<Engine> engine;
  EngineOptions options;  // init()'s, for the engines reform_world() starts
};

Runtime& runtime() {
  static Runtime* r = new Runtime;  // never destroyed: usable from static destructors
  return *r;
}

// The shared heap first: allocating it is a collective on the world, which the engine then
// takes over.
void start_engine(Runtime& r) {
  detail::start_shared_heap(r.job->world());
  try {
    r.engine = Engine::start(r.job->world(), r.options);
  } catch (...) {
    detail::retire_shared_heap();
    throw;
  }
}

Communicator& world_or_throw() {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  CHORUS_CHECK_ARG(r.engine != nullptr, "chorus is not initialised: call chorus::init() first");
  return r.job->world();
}

}  // namespace

void init() { init(EngineOptions::from_env()); }

void init(const EngineOptions& options) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  CHORUS_CHECK_ARG(r.engine == nullptr, "chorus::init() called twice without shutdown()");
  // Outside the log statement: CHORUS_LOG does not evaluate its operands below its level.
  const MallocTuning tuning = tune_malloc_for_training();
  CHORUS_LOG(kDebug, "init") << tuning.why;
  if (r.job) {
    r.job->reconnect();
  } else {
    r.job = Job::from_env();
  }
  r.options = options;
  try {
    start_engine(r);
  } catch (...) {
    r.job->disconnect();
    throw;
  }
}

void shutdown() {
  Runtime& r = runtime();
  std::unique_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    engine = std::move(r.engine);
  }
  if (!engine) return;
  // Engine::shutdown stops every rank's engine at the next cycle; without this barrier a
  // rank that finished early would fail the last collectives of the others.
  try {
    engine->barrier("chorus.shutdown").wait();
  } catch (const Error&) {
    // The job is going away anyway; the engine already reports the error to the ranks.
  }
  engine.reset();
  detail::retire_shared_heap();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.job) r.job->disconnect();
}

bool initialized() {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.engine != nullptr;
}

int rank() { return world_or_throw().rank(); }
int size() { return world_or_throw().size(); }
int local_rank() { return world_or_throw().local_rank(); }
int local_size() { return world_or_throw().local_size(); }
int cross_rank() { return world_or_throw().cross_rank(); }
int cross_size() { return world_or_throw().cross_size(); }

Engine& default_engine() { return detail::engine_or_default(nullptr); }

namespace detail {

Engine& engine_or_default(Engine* engine) {
  if (engine) return *engine;
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  CHORUS_CHECK_ARG(r.engine != nullptr, "chorus is not initialised: call chorus::init() first");
  return *r.engine;
}

std::string auto_name(Engine& engine, const char* prefix) { return engine.unnamed(prefix); }

Job& job() {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  CHORUS_CHECK_ARG(r.engine != nullptr, "chorus is not initialised: call chorus::init() first");
  return *r.job;
}

void reform_world() {
  Runtime& r = runtime();
  std::unique_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    CHORUS_CHECK_ARG(r.engine != nullptr, "chorus is not initialised: call chorus::init() first");
    engine = std::move(r.engine);
  }
  engine.reset();
  detail::retire_shared_heap();
  std::lock_guard<std::mutex> lock(r.mu);
  r.job->disconnect();
  r.job->reconnect();
  start_engine(r);
}

}  // namespace detail
}  // namespace chorus
