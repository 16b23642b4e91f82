// Memory shared by the ranks of a single-host communicator (Communicator::alloc_shared) and
// the allreduce that runs in it.
//
// Allocation is collective: every rank creates a region (transport/shm/shared_region.h), the
// ranks exchange the regions' identities over their links, and each maps every other's.
// Allocations get the same id, 1, 2, ..., on every rank, so a rank can name a buffer to
// the others as (allocation id, offset).
//
// The allreduce handshake goes through a control block per rank, in a region made with the
// first allocation: each rank posts its call (where its send and recv buffers are, count,
// type, op) and waits until every rank has posted the same call. When every rank's buffers
// are shared, rank r reduces its part of the elements (part r of p) from every rank's send
// buffer, a cache-sized block at a time, and copies each reduced block into every rank's
// recv buffer; it then posts "finished" and waits until every rank has. No byte goes
// through a link; each element is read once from each rank and written once to each rank.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/shared_buffer.h"
#include "comm/context.h"
#include "transport/shm/shared_region.h"

namespace chorus::comm {

struct SharedAllocation {
  uint64_t id = 0;  // 1, 2, ... in allocation order, the same on every rank; 0: not shared
  int rank = 0;     // this rank
  // By rank: this rank's own region, and (when shared) its mappings of the others'.
  std::vector<transport::shm::Region> regions;

  char* data(int r) const { return regions[r].data(); }
  size_t bytes() const { return regions[rank].data_bytes(); }
};

class SharedMemory {
 public:
  // Collective: a new allocation of `bytes` (the same on every rank, else InvalidArgument
  // on every rank), mapped by every rank when `may_share` (the same on every rank) and every
  // rank could open every other's; otherwise this rank's own memory (id 0).
  std::shared_ptr<SharedAllocation> allocate(Context& ctx, size_t bytes, bool may_share,
                                             SharedPages pages = SharedPages::kPopulated);
  // This rank's own memory of `bytes` (id 0), not collective: alloc_shared over MPI.
  static std::shared_ptr<SharedAllocation> private_allocation(
      int rank, int size, size_t bytes, SharedPages pages = SharedPages::kPopulated);

  // Whether a shared allocation exists (on every rank alike): then allreduces may take the
  // handshake (the plan decides, allreduce_plan.h).
  bool active() const { return control_ != nullptr; }
  // The handshake (collective): posts this rank's call and waits for every rank's. True
  // when every rank's send and recv lie in shared allocations — then run() must follow.
  // InvalidArgument on every rank when counts, types or ops differ; IoError / TimeoutError
  // from the waits as from any collective. REQUIRES: active().
  bool handshake(Context& ctx, const void* send, void* recv, size_t count, DataType type,
                 ReduceOp op);
  // The allreduce in shared memory of the call handshake() agreed on.
  void run(Context& ctx, size_t count, DataType type, ReduceOp op);
  // Allreduces run in shared memory so far; read from any thread.
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  // (id, offset) of the shared allocation holding [p, p + bytes) here; id 0 when none.
  // Any thread.
  void locate(const void* p, size_t bytes, uint64_t* id, uint64_t* offset) const;

  struct Call;  // a call as one rank posts it (shared_memory.cc)

 private:
  // Creates this rank's region for `a` (with a ControlBlock in it when `control`) and maps
  // every peer's (collective). False, on every rank, when some rank could not map a peer's:
  // then `a` holds only this rank's region.
  bool share(Context& ctx, SharedAllocation& a, size_t bytes, bool control,
             transport::shm::Pages pages);
  // This rank's view of where rank r's buffers of the call posted in `slot` are.
  void resolve(const Call& slot, int r, size_t bytes);
  void reduce_part(Context& ctx, size_t count, DataType type, ReduceOp op);
  // Waits until every rank has entered (or, `finished`, finished) call number `call`.
  void wait_all(Context& ctx, uint64_t call, bool finished);

  std::shared_ptr<SharedAllocation> control_;
  // allocations_[id - 1]; appended by the collectives' thread, read by locate() from any.
  mutable std::mutex allocations_mu_;
  std::vector<std::weak_ptr<SharedAllocation>> allocations_;
  uint64_t calls_ = 0;
  std::atomic<uint64_t> completed_{0};
  // Per call, reused: every rank's buffers as mapped here, and the allocations they are in.
  std::vector<const char*> src_;
  std::vector<char*> dst_;
  std::vector<std::shared_ptr<SharedAllocation>> held_;
};

}  // namespace chorus::comm
