#include "chorus/store.h"

namespace chorus {

std::vector<std::string> PrefixStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix_ + k);
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  base_.set(prefix_ + key, value);
}

std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_.get(prefix_ + key, timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_.add(prefix_ + key, delta);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_.check(prefixed(keys));
}

bool PrefixStore::remove(const std::string& key) { return base_.remove(prefix_ + key); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_.wait(prefixed(keys), timeout);
}

}  // namespace chorus
