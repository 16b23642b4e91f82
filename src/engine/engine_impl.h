// Engine::Impl: what an Engine owns (communicator, shared state, the loop and its thread).
#pragma once

#include <memory>
#include <mutex>
#include <thread>

#include "chorus/engine.h"
#include "engine/engine_loop.h"
#include "engine/process_set_table.h"
#include "engine/shared_state.h"

namespace chorus {

struct Engine::Impl {
  Impl(std::unique_ptr<Communicator> owned_comm, Communicator& c, EngineOptions o)
      : owned(std::move(owned_comm)),
        comm(c),
        options(std::move(o)),
        loop(comm, options, shared),
        sets(comm, options) {}

  Handle enqueue(engine::Request request, const void* input, void* output);

  std::unique_ptr<Communicator> owned;
  Communicator& comm;
  const EngineOptions options;
  engine::Shared shared;
  engine::Loop loop;
  engine::ProcessSetTable sets;
  std::mutex thread_mu;  // serialises shutdown() callers around join()
  std::thread thread;
};

}  // namespace chorus
