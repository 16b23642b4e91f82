#include "engine/response_cache.h"

namespace chorus::engine {

int ResponseCache::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

bool ResponseCache::matches(int slot, const Request& request) const {
  return slots_[slot].used && slots_[slot].mine == request;
}

int ResponseCache::put(const Response& response, const Request& mine, uint64_t tick) {
  if (!enabled()) return -1;
  int evicted = -1;
  int existing = find(response.name());
  if (existing >= 0) erase(existing);
  if (in_use_ >= capacity_) evicted = evict_lru();
  int slot;
  if (!free_.empty()) {
    slot = *free_.begin();
    free_.erase(free_.begin());
  } else {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot] = Slot{true, response, mine, tick};
  by_name_[response.name()] = slot;
  ++in_use_;
  return evicted;
}

int ResponseCache::evict_lru() {
  int victim = -1;
  for (int s = 0; s < num_slots(); ++s) {
    if (slots_[s].used && (victim < 0 || slots_[s].last_used < slots_[victim].last_used)) {
      victim = s;
    }
  }
  if (victim >= 0) erase(victim);
  return victim;
}

void ResponseCache::erase(int slot) {
  if (!slots_[slot].used) return;
  by_name_.erase(slots_[slot].response.name());
  slots_[slot] = Slot{};
  free_.insert(slot);
  --in_use_;
}

}  // namespace chorus::engine
