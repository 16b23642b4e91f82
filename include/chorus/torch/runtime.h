// The process-wide chorus runtime of a training program: a Job (from the launcher's
// environment) and an Engine on its world communicator.
//
// The functions of the torch layer take an optional `Engine*`; nullptr means the engine
// init() started. Passing an engine explicitly is how several "ranks" share one process
// (tests run ranks as threads, each with its own Engine) or how a program uses a
// communicator it built itself.
//
// Thread safety: init() and shutdown() must not race with each other or with any use of
// the default engine; everything else may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "chorus/engine.h"

namespace chorus {

class Job;

// Joins the job described by the environment (chorusrun, torchrun, mpirun, Slurm,
// TF_CONFIG, or a single process when none is set) and starts the engine. The first call
// also sets glibc's malloc up for training loops (large blocks kept on the heap instead of
// mapped and unmapped every step; CHORUS_MALLOC_TUNING=0 or the user's own GLIBC_TUNABLES,
// MALLOC_*_ variables or LD_PRELOAD leave it alone; docs/torch.md).
// Throws InvalidArgument when already initialised, and what Job::from_env throws.
// After shutdown(), init() again forms a new world over the same store connection (every
// rank must do so the same number of times).
void init();
// As init(), with the engine's options given (EngineOptions::from_env() above).
void init(const EngineOptions& options);
// A barrier (so that no rank stops the engine under another rank's last collectives),
// then stops the engine (and its process sets) and closes the world communicator. No-op
// when not initialised.
void shutdown();
bool initialized();

// REQUIRES for the following: initialized() (InvalidArgument otherwise).
int rank();
int size();
int local_rank();  // among the ranks on this host
int local_size();
int cross_rank();  // index of this host
int cross_size();
Engine& default_engine();

namespace detail {
// `engine` when given, else the default engine (InvalidArgument when not initialised).
Engine& engine_or_default(Engine* engine);
// Engine::unnamed(prefix): "<prefix>.noname.<n>", n counting per engine. Ranks must then
// issue their unnamed ops in the same order (as in Horovod).
std::string auto_name(Engine& engine, const char* prefix);
// The runtime's Job (InvalidArgument when not initialised): chorus/elastic.h asks it
// about the launcher's rounds.
Job& job();
// Elastic re-forming (chorus/elastic.h): stops the engine without shutdown()'s barrier
// (the world may be broken), forms the job's next world (Job::reconnect) and starts an
// engine on it with init()'s options. Throws what Job::reconnect throws (the runtime is
// then not initialised).
void reform_world();
}  // namespace detail

}  // namespace chorus
