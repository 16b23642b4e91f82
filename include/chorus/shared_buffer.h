// Memory that every rank of a communicator maps: what Communicator::alloc_shared returns.
// Allreduces whose buffers lie in such memory on every rank run without copies through the
// transport: each rank reduces its share of the elements straight from every rank's input
// and writes the result straight into every rank's output.
//
// A SharedBuffer is a handle: copies refer to the same memory, which stays valid while any
// copy exists, even after the communicator is destroyed.
#pragma once

#include <cstddef>
#include <memory>

namespace chorus {

// When alloc_shared's pages come into memory: all at once (a collective never faults them in
// midway), or each on first touch (a heap that reserves far more than it uses; in a child
// the process forks such memory turns private, copy-on-write, so the child's writes never
// reach this process or its peers).
enum class SharedPages { kPopulated, kOnTouch };

class Communicator;
namespace comm {
struct SharedAllocation;
}

class SharedBuffer {
 public:
  SharedBuffer() = default;  // no memory

  // This rank's memory: size() bytes, zeroed when allocated, aligned to a page.
  void* data() const;
  size_t size() const;
  // Whether the other ranks map this memory. False when the communicator cannot share
  // memory (ranks on several hosts, TCP links, one rank, or the kernel refuses to let the
  // ranks open each other's memory): then it is this rank's own memory and collectives on
  // it take the usual path. The same on every rank.
  bool shared() const;
  // Stops sharing: unmaps the other ranks' memory and makes shared() false, keeping this
  // rank's memory valid for as long as any copy of the handle exists (memory that outlives
  // its communicator's collectives). For every copy alike; on every rank alike.
  // REQUIRES: no collective of the communicator runs, nor in_shared_memory(), meanwhile.
  void unshare();

 private:
  friend class Communicator;  // alloc_shared makes them
  explicit SharedBuffer(std::shared_ptr<comm::SharedAllocation> allocation)
      : allocation_(std::move(allocation)) {}

  std::shared_ptr<comm::SharedAllocation> allocation_;
};

}  // namespace chorus
