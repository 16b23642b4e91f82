#include "pending_ops.h"

#include <algorithm>

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

bool PendingOps::holder_passed(int64_t holder) const {
  auto it = ops_.find(holder);
  return it != ops_.end() && last_synchronized_ > holder && it->second->poll();
}

void PendingOps::reserve(int set_id, const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& name : names) {
    auto it = names_.find({set_id, name});
    CHORUS_CHECK_ARG(it == names_.end() || holder_passed(it->second), "a second op named '", name,
                     "' while the first is in flight (submitted and not synchronized)");
  }
  for (const auto& name : names) names_[{set_id, name}] = kReserved;
}

void PendingOps::release(int set_id, const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& name : names) names_.erase({set_id, name});
}

int64_t PendingOps::add(PendingOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t id = next_++;
  for (const auto& name : op.names) names_[{op.set_id, name}] = id;
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
  last_synchronized_ = std::max(last_synchronized_, id);
  for (const auto& name : it->second->names) {
    auto held = names_.find({it->second->set_id, name});
    if (held != names_.end() && held->second == id) names_.erase(held);  // not if taken again
  }
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
