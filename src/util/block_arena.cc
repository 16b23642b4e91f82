#include "util/block_arena.h"

#include "chorus/error.h"

namespace chorus {

BlockArena::BlockArena(size_t capacity, size_t granule)
    : capacity_(capacity & ~(granule - 1)), granule_(granule) {
  CHORUS_CHECK_ARG(granule > 0 && (granule & (granule - 1)) == 0,
                   "BlockArena: granule must be a power of two, got ", granule);
  if (capacity_ > 0) add_free(0, capacity_);
}

void BlockArena::add_free(size_t offset, size_t bytes) {
  blocks_[offset] = Block{bytes, true};
  free_.emplace(bytes, offset);
}

std::optional<size_t> BlockArena::allocate(size_t bytes) {
  if (bytes == 0 || bytes > capacity_) return std::nullopt;
  const size_t want = (bytes + granule_ - 1) & ~(granule_ - 1);
  auto fit = free_.lower_bound({want, 0});
  if (fit == free_.end()) return std::nullopt;
  const auto [have, offset] = *fit;
  free_.erase(fit);
  blocks_[offset] = Block{want, false};
  if (have > want) add_free(offset + want, have - want);
  ++live_blocks_;
  live_bytes_ += want;
  return offset;
}

bool BlockArena::release(size_t offset) {
  auto it = blocks_.find(offset);
  if (it == blocks_.end() || it->second.free) return false;
  --live_blocks_;
  live_bytes_ -= it->second.bytes;
  size_t start = offset, bytes = it->second.bytes;
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free) {
    free_.erase({next->second.bytes, next->first});
    bytes += next->second.bytes;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free) {
      free_.erase({prev->second.bytes, prev->first});
      start = prev->first;
      bytes += prev->second.bytes;
    }
  }
  blocks_.erase(offset);
  add_free(start, bytes);
  return true;
}

}  // namespace chorus
