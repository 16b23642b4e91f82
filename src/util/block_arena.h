// Blocks carved from one range of memory: best fit (the smallest free range that fits, the
// lowest of equals), freed blocks merged with their free neighbours. The arena deals in
// offsets and never touches the memory, so it can manage memory that other processes map
// (the shared heap, src/torch/shared_heap.h) and be tested without any.
//
// Thread safety: none; the owner serializes calls.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace chorus {

class BlockArena {
 public:
  // Manages [0, capacity) in multiples of `granule` bytes (a power of two; capacity is
  // rounded down to one).
  BlockArena(size_t capacity, size_t granule);

  // The offset of a new block of at least `bytes` (> 0), a multiple of the granule; nullopt
  // when no free range is large enough.
  std::optional<size_t> allocate(size_t bytes);
  // Frees the block that starts at `offset`. False, changing nothing, when no live block
  // starts there.
  bool release(size_t offset);

  size_t live_blocks() const { return live_blocks_; }
  size_t live_bytes() const { return live_bytes_; }  // granules included
  size_t capacity() const { return capacity_; }

 private:
  struct Block {
    size_t bytes;
    bool free;
  };
  void add_free(size_t offset, size_t bytes);

  size_t capacity_;
  size_t granule_;
  std::map<size_t, Block> blocks_;            // by offset: every block, live or free
  std::set<std::pair<size_t, size_t>> free_;  // (bytes, offset) of the free ones
  size_t live_blocks_ = 0;
  size_t live_bytes_ = 0;
};

}  // namespace chorus
