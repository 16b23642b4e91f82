// What every collective algorithm works with: the mesh of links, the Progress that drives
// them under the call's deadline, and the communicator's reusable scratch memory.
// Algorithms see links only through transport/link.h and transport/progress.h.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "chorus/dtype.h"
#include "transport/mesh.h"
#include "transport/progress.h"

namespace chorus::comm {

// A buffer that grows on demand and never shrinks, so that steady-state collectives of a
// given size allocate nothing. Contents are not preserved across growth.
class Scratch {
 public:
  char* get(size_t bytes) {
    if (bytes > size_) {
      buf_.reset();  // release first: scratch can be gigabytes
      buf_.reset(new char[bytes]);
      size_ = bytes;
    }
    return buf_.get();
  }
  size_t capacity() const { return size_; }

 private:
  std::unique_ptr<char[]> buf_;
  size_t size_ = 0;
};

// Per-communicator memory reused by every call (one call at a time).
struct Workspace {
  Scratch incoming;                  // received data waiting to be reduced
  Scratch accumulator;               // partial results that are not the caller's (reduce_scatter)
  Scratch staging;                   // a multi-buffer allreduce's parts, packed (no single copy)
  std::vector<size_t> offsets;       // element offsets of per-rank blocks (size p + 1)
  std::vector<size_t> offsets_peer;  // a second table (alltoallv receive side)
};

struct Context {
  transport::Mesh& mesh;
  transport::Progress& progress;
  Workspace& ws;
  // When set, the algorithm runs among these ranks of the mesh only, as if they were the
  // whole group: its rank i is the mesh's group[i] (the same list on every member, this
  // rank at group_rank). The hierarchical allreduce runs its steps so.
  const std::vector<int>* group = nullptr;
  int group_rank = 0;

  int rank() const { return group ? group_rank : mesh.rank(); }
  int size() const { return group ? static_cast<int>(group->size()) : mesh.size(); }
  transport::Link& link(int peer) { return mesh.link(group ? (*group)[peer] : peer); }
  // This context narrowed to `ranks` of the mesh (REQUIRES: not narrowed already, this
  // rank among them at `me`).
  Context among(const std::vector<int>& ranks, int me) {
    return Context{mesh, progress, ws, &ranks, me};
  }
};

// Part i of `count` elements split into `parts` nearly equal parts (the first count % parts
// parts get one more): its offset and length. No multiplication that could overflow.
inline size_t part_offset(size_t count, size_t parts, size_t i) {
  return i * (count / parts) + std::min(i, count % parts);
}
inline size_t part_count(size_t count, size_t parts, size_t i) {
  return count / parts + (i < count % parts ? 1 : 0);
}

// Fills `offsets` (size p + 1) with the prefix sums of `counts`.
inline void prefix_offsets(const std::vector<size_t>& counts, std::vector<size_t>& offsets) {
  offsets.resize(counts.size() + 1);
  offsets[0] = 0;
  for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
}

// Fills `offsets` with `p` balanced blocks of `count` elements.
inline void balanced_offsets(size_t count, size_t p, std::vector<size_t>& offsets) {
  offsets.resize(p + 1);
  for (size_t i = 0; i <= p; ++i) offsets[i] = part_offset(count, p, i);
}

inline int mod(int a, int p) { return ((a % p) + p) % p; }

}  // namespace chorus::comm
