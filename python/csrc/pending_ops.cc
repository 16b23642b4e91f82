#include "pending_ops.h"

#include "chorus/error.h"

namespace chorus::python {

bool PendingOp::poll() const {
  for (const TensorHandle& t : tensors) {
    if (!t.poll()) return false;
  }
  return !handle.valid() || handle.poll();
}

bool PendingOp::wait_for(std::chrono::milliseconds timeout) const {
  for (const TensorHandle& t : tensors) {
    if (!t.wait_for(timeout)) return false;
  }
  return !handle.valid() || handle.wait_for(timeout);
}

void PendingOps::reserve(int set_id, const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& name : names) {
    CHORUS_CHECK_ARG(!names_.count({set_id, name}), "a second op named '", name,
                     "' while the first is in flight (submitted and not synchronized)");
  }
  for (const auto& name : names) names_.insert({set_id, name});
}

void PendingOps::release(int set_id, const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& name : names) names_.erase({set_id, name});
}

int64_t PendingOps::add(PendingOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t id = next_++;
  ops_.emplace(id, std::make_shared<PendingOp>(std::move(op)));
  return id;
}

std::shared_ptr<PendingOp> PendingOps::find(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(id);
  return it == ops_.end() ? nullptr : it->second;
}

void PendingOps::erase(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(id);
  if (it == ops_.end()) return;
  for (const auto& name : it->second->names) names_.erase({it->second->set_id, name});
  ops_.erase(it);
}

void PendingOps::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  ops_.clear();
  names_.clear();
}

PendingOps& pending_ops() {
  static PendingOps* ops = new PendingOps;  // never destroyed: usable at interpreter exit
  return *ops;
}

}  // namespace chorus::python
