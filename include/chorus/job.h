// A process's place in a distributed job, set up from whatever launcher started it
// (chorusrun, torchrun, mpirun, Slurm, TF_CONFIG; see the README's table): joins — or, as
// rank 0 of a torchrun-style job, hosts — the rendezvous store and creates the world
// communicator. This is what chorus::init() and chorus-bench stand on.
//
// The secret: taken from CHORUS_SECRET / CHORUS_SECRET_FILE. Without one, a single-host
// job (store on a loopback address) shares a random secret through a file only this user
// can read; a multi-host job refuses to start with InvalidArgument.
//
// Thread safety: create and use from one thread; world() follows Communicator's rules.
#pragma once

#include <cstdint>
#include <memory>

#include "chorus/communicator.h"
#include "chorus/store.h"

namespace chorus {

struct JobEnv;

class Job {
 public:
  // Throws InvalidArgument for a malformed environment, TimeoutError when the store or the
  // other ranks do not show up within options.timeout, AuthError on a wrong secret.
  static std::unique_ptr<Job> from_env(const CommunicatorOptions& options);
  static std::unique_ptr<Job> from_env();  // options from CommunicatorOptions::from_env()
  ~Job();

  // InvalidArgument after disconnect() until reconnect().
  Communicator& world();
  // The store, with keys scoped to this attempt (restart counter).
  Store& store();
  int restart_count() const;

  // Closes the world communicator (its links and shared memory) and keeps the store, so
  // that reconnect() can form a new world over it: chorus::shutdown() then chorus::init()
  // in one process. Idempotent.
  void disconnect();
  // Collective over every rank: a new world communicator, its rendezvous keys scoped by
  // how many times this job has connected, so every rank must disconnect and reconnect the
  // same number of times. No-op while connected. Throws what from_env() throws.
  // An elastic worker instead joins the launcher's next round, whoever is in it: its rank
  // and size may change (docs/elastic.md); it throws IoError when the launcher let this
  // worker go, TimeoutError when no round forms within CHORUS_ELASTIC_TIMEOUT_SECONDS.
  void reconnect();

  // Whether this worker was started by an elastic launcher (CHORUS_ELASTIC_ID).
  bool elastic() const;
  // The launcher's round the current world was formed in (-1 when not elastic).
  int64_t elastic_round() const;
  // Whether the launcher has published a round after elastic_round(): workers joined or
  // left, so the world should re-form (every rank must agree on it first: see
  // chorus/elastic.h). False when not elastic. Throws the store's errors.
  bool newer_round_published();

  struct Impl;

 private:
  explicit Job(std::unique_ptr<Impl> impl);
  void join_next_round();
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
