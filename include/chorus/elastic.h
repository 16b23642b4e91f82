// Elastic training (Horovod Elastic's model): workers may leave (killed, preempted) or join
// (the launcher's host discovery) while the job runs, and the training loop goes on
// without restarting anyone. Started by `chorusrun --min-np A --max-np B ...`
// (docs/elastic.md); a program run any other way behaves as a fixed job of its size.
//
//   chorus::init();
//   chorus::elastic::TorchState state(*model, sgd);          // chorus/torch/elastic_state.h
//   chorus::elastic::ElasticSampler sampler(dataset_size, batch);
//   state.set_sampler(&sampler);
//   chorus::elastic::run(state, [&](chorus::elastic::State&) {
//     chorus::DistributedOptimizer opt(sgd, model->named_parameters());  // on this world
//     while (sampler.epoch() < epochs) {
//       if (sampler.epoch_done()) { sampler.set_epoch(sampler.epoch() + 1); state.commit(); }
//       else { train on sampler.next_batch(rank, size); sampler.record_step(size);
//              state.commit(); }
//     }
//   });
//
// On a collective's IoError or TimeoutError (a worker gone), every survivor rolls back to
// its last commit(), the world re-forms in the launcher's next round (new ranks and size),
// the reset callbacks run (to rescale the learning rate, say), the state is synced from
// the worker that committed most and the training function is called again. When the
// launcher adds workers, commit() raises HostsUpdatedInterrupt on every rank alike, and the
// same happens without the rollback; the newcomers get the state in the sync.
//
// Thread safety: one thread per process drives a State and run().
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "chorus/error.h"
#include "chorus/torch/sampler.h"

namespace chorus::elastic {

// The launcher changed who is in the job; raised by commit() on every rank at once.
class HostsUpdatedInterrupt : public Error {
 public:
  using Error::Error;
};

// Which samples each rank trains on, such that an epoch visits every sample exactly once
// however often the world resizes during it: every step, the world takes the next
// size * batch_size positions of the epoch's permutation (DistributedSampler's, with its
// seed), rank r the r-th block; the last step splits the rest as evenly as it goes.
// Progress counts committed steps, so a rolled-back step is trained again, by whoever is
// left.
class ElasticSampler {
 public:
  // REQUIRES: dataset_size >= 0, batch_size >= 1 (InvalidArgument otherwise).
  ElasticSampler(int64_t dataset_size, int64_t batch_size, DistributedSamplerOptions options = {});

  // Starts `epoch` from its beginning (same value on every rank).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  // Rank `rank`'s indices of the next step in a world of `size`; empty once the epoch is
  // done (or when the last step has fewer samples than ranks).
  std::vector<int64_t> next_batch(int rank, int size) const;
  // The step trained by a world of `size` is done: progress moves past its samples.
  void record_step(int size);
  // Samples of this epoch the world has been through; the epoch's permutation positions
  // [0, processed()) are done.
  int64_t processed() const { return processed_; }
  bool epoch_done() const { return processed_ >= dataset_size_; }
  int64_t dataset_size() const { return dataset_size_; }

  // What State saves, restores and syncs.
  struct Progress {
    int64_t epoch = 0;
    int64_t processed = 0;
  };
  Progress progress() const { return {epoch_, processed_}; }
  void set_progress(Progress p);

 private:
  int64_t dataset_size_;
  int64_t batch_size_;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t processed_ = 0;
  std::vector<int64_t> order_;  // the epoch's permutation
};

// What survives a reset: subclasses save and restore their own parts (TorchState: model,
// optimizer and named values); the base class keeps the commit count and the sampler.
class State {
 public:
  virtual ~State() = default;

  // Saves the state in memory (what restore() goes back to), then check_host_updates().
  // Collective: every rank commits at the same points.
  void commit();
  // Back to the last commit (the state at construction before any).
  void restore();
  // Every rank takes the state of the rank with the most commits (the lowest such rank).
  // Collective; run() calls it.
  void sync();
  // Throws HostsUpdatedInterrupt on every rank when the launcher has published a new
  // membership (one tiny allreduce decides, so every rank agrees). Collective.
  void check_host_updates();
  // Called after every reset, once the new world exists (before the state is synced).
  void register_reset_callback(std::function<void()> callback);
  // Saved, restored and synced with the state; must outlive it.
  void set_sampler(ElasticSampler* sampler) { sampler_ = sampler; }
  // commit() calls so far (synced: the count of the rank synced from).
  int64_t commits() const { return commits_; }

 protected:
  // Copies what restore() must bring back.
  virtual void save() = 0;
  // Brings back what save() copied.
  virtual void load() = 0;
  // Collective: every rank's state becomes root's (current, not saved, state), then each
  // rank save()s it.
  virtual void broadcast_from(int root) = 0;

 private:
  friend void run(State& state, const std::function<void(State&)>& train);
  void reset_done();

  int64_t commits_ = 0;
  ElasticSampler* sampler_ = nullptr;
  ElasticSampler::Progress saved_progress_;
  bool sampler_saved_ = false;
  std::vector<std::function<void()>> reset_callbacks_;
};

// Collective: whether the launcher has published a new membership since this world
// formed, as every rank agrees (one 8-byte allreduce of each rank's view). False outside
// an elastic job. REQUIRES: chorus::init().
bool hosts_updated();
// Whether the world communicator is broken, i.e. a failed collective meant a worker gone
// (or silent) rather than the program's own error. REQUIRES: chorus::init().
bool world_failed();

// Calls train(state) until it returns, riding out resizes as described at the top.
// REQUIRES: chorus::init() (InvalidArgument otherwise). Throws what train throws that is
// not a failure of the world (an IoError or TimeoutError while the world communicator is
// intact is the program's own and is passed on), and what re-forming throws: TimeoutError
// when no new world forms within CHORUS_ELASTIC_TIMEOUT_SECONDS, IoError when the launcher
// let this worker go. Outside an elastic job a failure is passed on as it is.
void run(State& state, const std::function<void(State&)>& train);

}  // namespace chorus::elastic
