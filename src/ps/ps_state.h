// Everything one parameter server holds: its shards (values, optimizer slots, step
// counters), the version counter, the kSync accumulator, and the counters behind PsStats.
// Connection threads call it concurrently: async pushes update disjoint shards in
// parallel, each shard under its own lock.
//
// Lock order: model_mu_ (exclusive for create/restore, shared for everything else) ->
// round_mu_ (version, learning rate, accumulator, counters) -> a shard's mutex.
// wait_version() takes only round_mu_, so a pull waiting for a version never holds up a
// re-create.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "layout.h"
#include "state_file.h"
#include "util/deadline.h"

namespace chorus::ps {

struct ShardState {
  std::mutex mu;
  std::vector<float> values, slot0, slot1;  // slots sized by slot_count()
  int64_t step = 0;
  int64_t begin = 0;  // offset of this shard in the ps's flat (wire) order
};

struct Model {
  PartLayout part;
  PsConfig config;
  std::vector<std::unique_ptr<ShardState>> shards;
  int64_t elements = 0;
};

class PsState {
 public:
  enum class WaitResult { kReady, kTimeout, kStopped, kPeerGone };
  struct PushResult {
    bool applied = false;  // false: a stale kSync push, dropped
    int64_t version = 0;
  };

  // A model whose shards hold no memory yet: nothing is allocated for a layout before its
  // values arrive (a peer may announce CHORUS_PS_MAX_ELEMENTS and send nothing). The caller
  // fills each shard's values (part.shards[i].length floats), then calls size_slots().
  // InvalidArgument when the shards hold more than CHORUS_PS_MAX_ELEMENTS in all.
  static std::unique_ptr<Model> new_model(PartLayout part, PsConfig config);
  // Zeroed optimizer slots for every shard, once its values are in. InvalidArgument when a
  // shard's values do not match its length.
  static void size_slots(Model& model);
  // Replaces the current model; version and counters start again at 0.
  void install(std::unique_ptr<Model> model);

  // False before the first create.
  bool layout(PartLayout& part, PsConfig& config) const;
  // Elements of the current model and its generation (which changes on every install).
  int64_t elements(int64_t& generation) const;

  // Waits until the version is >= min_version, the deadline passes, stop() is called or
  // peer_gone() says the client left (checked every 100 ms).
  WaitResult wait_version(int64_t min_version, Deadline deadline,
                          const std::function<bool()>& peer_gone);
  // Copies every shard into `out`, in wire order; returns their version. InvalidArgument
  // before create or when the model was replaced after `generation` was read.
  int64_t read_values(int64_t generation, std::vector<float>& out);
  // Applies (kAsync, kBoundedStaleness) or accumulates (kSync) `grads` (elements() floats
  // in wire order). lr >= 0 becomes the learning rate. InvalidArgument as above, or for a
  // kSync tag newer than the version.
  PushResult push(int64_t generation, int64_t tag, double lr, const float* grads);
  PsStats stats() const;

  // The state file (state_file.h) of the current model; its exact size.
  std::string save() const;
  uint64_t state_file_bytes() const;
  // InvalidArgument when the file is malformed or holds another layout or optimizer kind.
  void restore(const std::string& file);

  // Wakes every waiter with kStopped, now and later.
  void stop();

 private:
  const Model& model_or_throw(int64_t generation) const;  // REQUIRES model_mu_ held
  void apply_all(const float* grads);                     // REQUIRES model_mu_, round_mu_
  PushResult push_sync(int64_t tag, double lr, const float* grads);
  StateHeader header_locked() const;  // REQUIRES model_mu_, round_mu_

  mutable std::shared_mutex model_mu_;
  std::unique_ptr<Model> model_;  // guarded by model_mu_
  int64_t generation_ = 0;        // guarded by model_mu_

  mutable std::mutex round_mu_;
  std::condition_variable version_cv_;
  int64_t version_ = 0;       // guarded by round_mu_
  double lr_ = 0;             // guarded by round_mu_
  std::vector<float> accum_;  // kSync gradient sum, guarded by round_mu_
  int accum_count_ = 0;
  int64_t applied_ = 0, dropped_ = 0;
  bool stopped_ = false;
};

}  // namespace chorus::ps
