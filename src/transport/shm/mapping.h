// The memory under shared-memory segments and regions: sealed anonymous memfds, and their
// MAP_SHARED mappings, unmapped when the owner goes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/net.h"

namespace chorus::transport::shm {

// When a mapping's pages come into memory.
enum class Pages : uint8_t {
  // All at once, when mapped: a collective never faults them in midway.
  kPopulated,
  // Each on first touch: for a heap that reserves far more than it will use. Such a mapping
  // turns private (copy-on-write) in a child the process forks, so that what the child
  // writes never reaches this process or its peers (a DataLoader worker's writes, say);
  // pages this process writes after the fork may still show in the child until the child
  // writes them. (Under strict overcommit the child's mapping is read-only instead.)
  kOnTouch,
};

// A whole-file MAP_SHARED mapping (move-only; unmapped when destroyed).
class Mapping {
 public:
  Mapping() = default;
  ~Mapping() { reset(); }
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Maps `size` bytes of `fd` read-write. IoError when mmap fails.
  static Mapping map(int fd, size_t size, Pages pages = Pages::kPopulated);

  char* data() const { return base_; }
  size_t size() const { return size_; }
  void reset();

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  bool on_touch_ = false;  // registered to turn private in forked children
};

// A new anonymous memfd (no name in /dev/shm; the kernel frees it with its last mapping) of
// `size` zeroed bytes, sealed against shrinking and growing so that a peer cannot make our
// accesses fault (SIGBUS). IoError when memory is short.
net::Fd create_sealed_memfd(const char* name, size_t size);

// Whether `fd` is exactly `size` bytes and sealed against shrinking: the check before
// mapping a descriptor that came from a peer.
bool has_size_and_shrink_seal(int fd, size_t size);

}  // namespace chorus::transport::shm
