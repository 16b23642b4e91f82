// chorus/elastic.h: the sampler, the State's commit/restore/sync and run(). No libtorch in
// this file (TorchState is in elastic_state.cc).
#include "chorus/elastic.h"

#include <algorithm>

#include "chorus/job.h"
#include "chorus/torch/runtime.h"
#include "util/log.h"

namespace chorus::elastic {

// ---- ElasticSampler ---------------------------------------------------------------------

ElasticSampler::ElasticSampler(int64_t dataset_size, int64_t batch_size,
                               DistributedSamplerOptions options)
    : dataset_size_(dataset_size), batch_size_(batch_size), options_(options) {
  CHORUS_CHECK_ARG(dataset_size >= 0, "ElasticSampler: dataset_size must be >= 0, got ",
                   dataset_size);
  CHORUS_CHECK_ARG(batch_size >= 1, "ElasticSampler: batch_size must be >= 1, got ", batch_size);
  set_epoch(0);
}

void ElasticSampler::set_epoch(int64_t epoch) {
  DistributedSamplerOptions whole = options_;
  whole.drop_last = false;
  DistributedSampler one_rank(dataset_size_, 1, 0, whole);
  one_rank.set_epoch(epoch);
  order_ = one_rank.indices();
  epoch_ = epoch;
  processed_ = 0;
}

void ElasticSampler::set_progress(Progress p) {
  CHORUS_CHECK_ARG(p.processed >= 0 && p.processed <= dataset_size_, "ElasticSampler: progress ",
                   p.processed, " outside [0, ", dataset_size_, "]");
  if (p.epoch != epoch_) set_epoch(p.epoch);
  processed_ = p.processed;
}

std::vector<int64_t> ElasticSampler::next_batch(int rank, int size) const {
  CHORUS_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "ElasticSampler: rank ", rank, " of ",
                   size);
  const int64_t step = std::min(dataset_size_ - processed_, batch_size_ * size);
  // Rank r gets [r * step / size, (r + 1) * step / size): whole batches when the step is
  // full, an even split of the rest otherwise.
  const int64_t begin = processed_ + step * rank / size;
  const int64_t end = processed_ + step * (rank + 1) / size;
  return std::vector<int64_t>(order_.begin() + begin, order_.begin() + end);
}

void ElasticSampler::record_step(int size) {
  CHORUS_CHECK_ARG(size >= 1, "ElasticSampler: size must be >= 1, got ", size);
  processed_ = std::min(dataset_size_, processed_ + batch_size_ * size);
}

// ---- State ------------------------------------------------------------------------------

namespace {

Engine& engine() { return default_engine(); }

int64_t allreduce_one(const char* name, int64_t value, ReduceOp op) {
  engine().allreduce(name, &value, &value, DataType::kInt64, {1}, op).wait();
  return value;
}

}  // namespace

bool world_failed() {
  try {
    return detail::job().world().broken();
  } catch (const Error&) {
    return true;  // no world at all
  }
}

bool hosts_updated() {
  const int64_t changed = detail::job().newer_round_published() ? 1 : 0;
  return allreduce_one("elastic.host_updates", changed, ReduceOp::kMax) != 0;
}

void State::commit() {
  save();
  if (sampler_) {
    saved_progress_ = sampler_->progress();
    sampler_saved_ = true;
  }
  ++commits_;
  check_host_updates();
}

void State::restore() {
  load();
  if (sampler_ && sampler_saved_) sampler_->set_progress(saved_progress_);
}

void State::check_host_updates() {
  if (hosts_updated()) throw HostsUpdatedInterrupt("the launcher changed the job's workers");
}

void State::sync() {
  const int rank = engine().rank();
  const int64_t most = allreduce_one("elastic.most_commits", commits_, ReduceOp::kMax);
  const int root = static_cast<int>(allreduce_one(
      "elastic.sync_root", commits_ == most ? rank : engine().size(), ReduceOp::kMin));
  ElasticSampler::Progress p = sampler_ ? sampler_->progress() : ElasticSampler::Progress{};
  int64_t shared[3] = {commits_, p.epoch, p.processed};
  engine().broadcast("elastic.sync_counters", shared, DataType::kInt64, {3}, root).wait();
  commits_ = shared[0];
  if (sampler_) {
    sampler_->set_progress({shared[1], shared[2]});
    saved_progress_ = sampler_->progress();
    sampler_saved_ = true;
  }
  broadcast_from(root);
}

void State::register_reset_callback(std::function<void()> callback) {
  reset_callbacks_.push_back(std::move(callback));
}

void State::reset_done() {
  for (auto& callback : reset_callbacks_) callback();
}

// ---- run --------------------------------------------------------------------------------

void run(State& state, const std::function<void(State&)>& train) {
  CHORUS_CHECK_ARG(initialized(), "elastic::run: call chorus::init() first");
  for (;;) {
    try {
      state.sync();
      train(state);
      return;
    } catch (const HostsUpdatedInterrupt&) {
      CHORUS_LOG(kInfo, "elastic") << "workers joined or left: re-forming at the last commit";
    } catch (const Error& e) {
      const bool comm_failure = dynamic_cast<const IoError*>(&e) != nullptr ||
                                dynamic_cast<const TimeoutError*>(&e) != nullptr;
      if (!comm_failure || !detail::job().elastic() || !world_failed()) throw;
      CHORUS_LOG(kWarning, "elastic")
          << "the world failed (" << e.what() << "): rolling back to commit " << state.commits();
      state.restore();
    }
    detail::reform_world();
    state.reset_done();
  }
}

}  // namespace chorus::elastic
