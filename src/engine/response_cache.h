// The response cache (Horovod's fast path). A response that ran once is remembered under
// a slot number on every rank; when the same name comes back with the same metadata, a
// rank only sets the slot's bit in the cycle's int32 allreduce, and the slot runs once
// every rank has set it — no metadata is exchanged. Slots are assigned, touched and
// evicted (least recently used) from global events only, so every rank's cache is the
// same and slot numbers mean the same thing everywhere.
//
// Thread safety: engine thread only.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/response.h"

namespace chorus::engine {

class ResponseCache {
 public:
  explicit ResponseCache(int capacity) : capacity_(capacity) {}

  bool enabled() const { return capacity_ > 0; }
  // Slot count, used or not: the length of the cycle's bit-vector section.
  int num_slots() const { return static_cast<int>(slots_.size()); }
  // The slot holding `name`, or -1.
  int find(const std::string& name) const;
  // Whether this rank's `request` is what it sent when the slot was filled.
  bool matches(int slot, const Request& request) const;
  const Response& response(int slot) const { return slots_[slot].response; }
  bool used(int slot) const { return slots_[slot].used; }

  // Remembers `response` (this rank sent `mine`) at `tick`. When full, evicts the least
  // recently used slot first and returns it (else -1), so callers can demote ops on it.
  int put(const Response& response, const Request& mine, uint64_t tick);
  void touch(int slot, uint64_t tick) { slots_[slot].last_used = tick; }
  void erase(int slot);

 private:
  struct Slot {
    bool used = false;
    Response response;
    Request mine;
    uint64_t last_used = 0;
  };
  int evict_lru();

  int capacity_;
  int in_use_ = 0;
  std::vector<Slot> slots_;
  std::set<int> free_;  // lowest first, so every rank reuses the same slot
  std::unordered_map<std::string, int> by_name_;
};

}  // namespace chorus::engine
