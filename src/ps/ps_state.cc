#include "ps_state.h"

#include <algorithm>
#include <cstring>

#include "chorus/error.h"
#include "optimizer_kernels.h"

namespace chorus::ps {
namespace {

ShardView view_of(ShardState& s) {
  return ShardView{s.values.data(), s.slot0.empty() ? nullptr : s.slot0.data(),
                   s.slot1.empty() ? nullptr : s.slot1.data(),
                   static_cast<int64_t>(s.values.size())};
}

void copy_floats(float* dst, const std::string& src, size_t& at, size_t n) {
  if (n == 0) return;
  std::memcpy(dst, src.data() + at, n * sizeof(float));
  at += n * sizeof(float);
}

}  // namespace

std::unique_ptr<Model> PsState::new_model(PartLayout part, PsConfig config) {
  auto model = std::make_unique<Model>();
  // A part that did not come through get_part must not size the shards unchecked either.
  model->elements = checked_elements(part);
  int64_t begin = 0;
  for (const Shard& s : part.shards) {
    auto shard = std::make_unique<ShardState>();
    shard->begin = begin;
    begin += s.length;
    model->shards.push_back(std::move(shard));
  }
  model->part = std::move(part);
  model->config = config;
  return model;
}

void PsState::size_slots(Model& model) {
  const int slots = slot_count(model.config.optimizer);
  for (size_t i = 0; i < model.shards.size(); ++i) {
    ShardState& shard = *model.shards[i];
    const auto n = static_cast<size_t>(model.part.shards[i].length);
    CHORUS_CHECK_ARG(shard.values.size() == n, "ps shard ", i, " holds ", shard.values.size(),
                     " values, its layout ", n);
    if (slots >= 1) shard.slot0.assign(n, 0.0f);
    if (slots >= 2) shard.slot1.assign(n, 0.0f);
  }
}

void PsState::install(std::unique_ptr<Model> model) {
  std::unique_lock<std::shared_mutex> lock(model_mu_);
  std::lock_guard<std::mutex> round(round_mu_);
  lr_ = model->config.optimizer.learning_rate;
  model_ = std::move(model);
  ++generation_;
  version_ = 0;
  accum_.clear();
  accum_count_ = 0;
  applied_ = dropped_ = 0;
  version_cv_.notify_all();
}

bool PsState::layout(PartLayout& part, PsConfig& config) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  if (!model_) return false;
  part = model_->part;
  config = model_->config;
  std::lock_guard<std::mutex> round(round_mu_);
  config.optimizer.learning_rate = lr_;
  return true;
}

int64_t PsState::elements(int64_t& generation) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  generation = generation_;
  return model_ ? model_->elements : 0;
}

const Model& PsState::model_or_throw(int64_t generation) const {
  CHORUS_CHECK_ARG(model_ != nullptr,
                   "the parameter server has no variables yet (the chief "
                   "has not called create())");
  CHORUS_CHECK_ARG(generation == generation_,
                   "the chief re-created the variables during this "
                   "request");
  return *model_;
}

PsState::WaitResult PsState::wait_version(int64_t min_version, Deadline deadline,
                                          const std::function<bool()>& peer_gone) {
  std::unique_lock<std::mutex> lock(round_mu_);
  for (;;) {
    if (stopped_) return WaitResult::kStopped;
    if (version_ >= min_version) return WaitResult::kReady;
    if (deadline.expired()) return WaitResult::kTimeout;
    if (peer_gone()) return WaitResult::kPeerGone;
    auto slice = Clock::now() + std::chrono::milliseconds(100);
    version_cv_.wait_until(lock, std::min(slice, deadline.at()));
  }
}

int64_t PsState::read_values(int64_t generation, std::vector<float>& out) {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  const Model& model = model_or_throw(generation);
  out.resize(static_cast<size_t>(model.elements));
  // In kSync values change only when a round completes, under round_mu_: holding it makes
  // the copy exactly the returned version. Async copies are per shard, Hogwild-style.
  std::unique_lock<std::mutex> round(round_mu_);
  int64_t version = version_;
  if (model.config.mode != UpdateMode::kSync) round.unlock();
  for (const auto& shard : model.shards) {
    std::lock_guard<std::mutex> guard(shard->mu);
    std::copy(shard->values.begin(), shard->values.end(), out.begin() + shard->begin);
  }
  return version;
}

void PsState::apply_all(const float* grads) {
  for (const auto& shard : model_->shards) {
    std::lock_guard<std::mutex> guard(shard->mu);
    apply_update(model_->config.optimizer, lr_, view_of(*shard), grads + shard->begin,
                 ++shard->step);
  }
}

PsState::PushResult PsState::push(int64_t generation, int64_t tag, double lr, const float* grads) {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  const Model& model = model_or_throw(generation);
  if (model.config.mode == UpdateMode::kSync) return push_sync(tag, lr, grads);
  double rate;
  {
    std::lock_guard<std::mutex> round(round_mu_);
    if (lr >= 0) lr_ = lr;
    rate = lr_;
  }
  for (const auto& shard : model.shards) {  // shard by shard: other pushes run alongside
    std::lock_guard<std::mutex> guard(shard->mu);
    apply_update(model.config.optimizer, rate, view_of(*shard), grads + shard->begin,
                 ++shard->step);
  }
  std::lock_guard<std::mutex> round(round_mu_);
  ++applied_;
  ++version_;
  version_cv_.notify_all();
  return {true, version_};
}

// REQUIRES model_mu_ held (shared).
PsState::PushResult PsState::push_sync(int64_t tag, double lr, const float* grads) {
  std::lock_guard<std::mutex> round(round_mu_);
  if (tag < version_) {
    ++dropped_;
    return {false, version_};
  }
  CHORUS_CHECK_ARG(tag == version_, "push for version ", tag,
                   " but the parameter server is at "
                   "version ",
                   version_, " (a worker cannot be ahead of the servers)");
  if (lr >= 0) lr_ = lr;
  const auto n = static_cast<size_t>(model_->elements);
  if (accum_.size() != n) accum_.assign(n, 0.0f);
  for (size_t i = 0; i < n; ++i) accum_[i] += grads[i];
  ++applied_;
  if (++accum_count_ < model_->config.num_workers) return {true, version_};
  const float count = static_cast<float>(accum_count_);
  for (float& g : accum_) g /= count;  // the mean, as an allreduce-average would give
  apply_all(accum_.data());
  std::fill(accum_.begin(), accum_.end(), 0.0f);
  accum_count_ = 0;
  ++version_;
  version_cv_.notify_all();
  return {true, version_};
}

PsStats PsState::stats() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  std::lock_guard<std::mutex> round(round_mu_);
  return PsStats{version_, applied_, dropped_, model_ ? model_->elements : 0};
}

StateHeader PsState::header_locked() const {
  StateHeader h;
  h.part = model_->part;
  h.config = model_->config;
  h.config.optimizer.learning_rate = lr_;
  h.version = version_;
  for (const auto& shard : model_->shards) h.steps.push_back(shard->step);
  return h;
}

uint64_t PsState::state_file_bytes() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  CHORUS_CHECK_ARG(model_ != nullptr, "the parameter server has no variables yet");
  return state_file_size(model_->part, model_->config);  // what the client expects, too
}

std::string PsState::save() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  CHORUS_CHECK_ARG(model_ != nullptr, "the parameter server has no variables yet");
  std::lock_guard<std::mutex> round(round_mu_);  // no kSync round completes meanwhile
  std::string out = encode_state_header(header_locked());
  out.reserve(out.size() +
              static_cast<size_t>(state_floats(model_->part, model_->config.optimizer)) * 4);
  for (const auto& shard : model_->shards) {
    std::lock_guard<std::mutex> guard(shard->mu);
    for (const auto* a : {&shard->values, &shard->slot0, &shard->slot1}) {
      out.append(reinterpret_cast<const char*>(a->data()), a->size() * sizeof(float));
    }
  }
  return out;
}

void PsState::restore(const std::string& file) {
  size_t at = 0;
  StateHeader h = decode_state(file, at);
  std::unique_lock<std::shared_mutex> lock(model_mu_);
  CHORUS_CHECK_ARG(model_ != nullptr, "restore_state before create()");
  CHORUS_CHECK_ARG(same_layout(h.part, model_->part), "ps state file for ps ", h.part.ps_index,
                   " of ", h.part.num_ps, " holds another layout than this ps (ps ",
                   model_->part.ps_index, " of ", model_->part.num_ps, ")");
  CHORUS_CHECK_ARG(h.config.optimizer.kind == model_->config.optimizer.kind &&
                       slot_count(h.config.optimizer) == slot_count(model_->config.optimizer),
                   "ps state file was written with another optimizer");
  std::lock_guard<std::mutex> round(round_mu_);
  for (size_t i = 0; i < model_->shards.size(); ++i) {
    ShardState& s = *model_->shards[i];
    for (auto* a : {&s.values, &s.slot0, &s.slot1}) copy_floats(a->data(), file, at, a->size());
    s.step = h.steps[i];
  }
  model_->config.optimizer = h.config.optimizer;
  lr_ = h.config.optimizer.learning_rate;
  version_ = h.version;
  accum_.clear();
  accum_count_ = 0;
  version_cv_.notify_all();
}

void PsState::stop() {
  std::lock_guard<std::mutex> round(round_mu_);
  stopped_ = true;
  version_cv_.notify_all();
}

}  // namespace chorus::ps
