#include "comm/shared_memory.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <new>
#include <sstream>
#include <string>

#include "chorus/error.h"
#include "comm/algorithms.h"
#include "util/log.h"
#include "util/reduce.h"
#include "util/stream_copy.h"

namespace chorus::comm {

using transport::shm::Pages;
using transport::shm::Region;
using transport::shm::RegionIdentity;

// A call as a rank posts it in its control block.
struct SharedMemory::Call {
  uint64_t send_id, send_offset, recv_id, recv_offset, count;
  uint32_t type, op;
};

namespace {

// One per rank, in the data of its control region; only its rank writes it. Two call slots,
// used alternately: a rank can be at most one call ahead of another that still reads.
struct ControlBlock {
  alignas(64) std::atomic<uint64_t> entered;
  alignas(64) SharedMemory::Call calls[2];
  alignas(64) std::atomic<uint64_t> finished;
};

// The layout documented in docs/wire_format.md.
static_assert(sizeof(SharedMemory::Call) == 48);
static_assert(offsetof(ControlBlock, calls) == 64 && offsetof(ControlBlock, finished) == 192);
static_assert(sizeof(ControlBlock) <= 4096, "fits the control region's page");

// Reduced a block at a time (into the own output, or scratch that stays in L1: reduce_part),
// then copied to every other rank. In place on 2 ranks a block's own and peer lines (32 KiB
// at this size) stay in a 48 KiB L1 until the copy reads them: 1.14-1.18x the busbw of
// 32 KiB blocks from 1 to 64 MiB (Intel Xeon VM, docs/algorithms.md).
constexpr size_t kBlockBytes = size_t{16} << 10;
// Results are written past the cache (util/stream_copy.h) when the call's buffers — every
// rank's input, and its output where apart — exceed this, three quarters of the AMD EPYC's
// 32 MiB L3: the outputs would otherwise evict the inputs and the rings of the next call.
// Below it they stay in the cache, where the caller reads them next (an optimizer step on
// in-place gradient buckets). Only outputs apart from their inputs stream: a buffer
// reduced in place was just read, so its lines are in the cache already, and a streaming
// store to a cached line costs its eviction on top (2 ranks in place, Intel Xeon VM:
// 16 MiB 10.5-11.4 GB/s through the cache against 4.2-4.6 streamed). docs/algorithms.md.
constexpr size_t kStreamingMinFootprint = size_t{24} << 20;

ControlBlock& control_block(const SharedAllocation& control, int r) {
  return *reinterpret_cast<ControlBlock*>(control.data(r));
}

std::string describe_call(const SharedMemory::Call& c) {
  std::ostringstream out;
  out << c.count << ' ';
  if (c.type < kNumDataTypes) {
    out << dtype_name(static_cast<DataType>(c.type));
  } else {
    out << "(type " << c.type << ')';
  }
  out << ' ';
  if (c.op < kNumReduceOps) {
    out << reduce_op_name(static_cast<ReduceOp>(c.op));
  } else {
    out << "(op " << c.op << ')';
  }
  return out.str();
}

Pages pages_of(SharedPages pages) {
  return pages == SharedPages::kOnTouch ? Pages::kOnTouch : Pages::kPopulated;
}

}  // namespace

std::shared_ptr<SharedAllocation> SharedMemory::private_allocation(int rank, int size, size_t bytes,
                                                                   SharedPages pages) {
  auto a = std::make_shared<SharedAllocation>();
  a->rank = rank;
  a->regions.resize(size);
  a->regions[rank] = Region::create(bytes, pages_of(pages));
  return a;
}

std::shared_ptr<SharedAllocation> SharedMemory::allocate(Context& ctx, size_t bytes, bool may_share,
                                                         SharedPages pages) {
  auto a = std::make_shared<SharedAllocation>();
  a->rank = ctx.rank();
  a->regions.resize(ctx.size());
  if (may_share && !control_) {
    auto control = std::make_shared<SharedAllocation>();
    control->rank = ctx.rank();
    control->regions.resize(ctx.size());
    if (share(ctx, *control, sizeof(ControlBlock), true, Pages::kPopulated)) {
      control_ = std::move(control);
    }
  }
  if (!control_ || !share(ctx, *a, bytes, false, pages_of(pages))) {
    if (a->data(a->rank) == nullptr) a->regions[a->rank] = Region::create(bytes, pages_of(pages));
    return a;  // plain memory (id 0)
  }
  std::lock_guard<std::mutex> lock(allocations_mu_);
  allocations_.push_back(a);
  a->id = allocations_.size();
  return a;
}

bool SharedMemory::share(Context& ctx, SharedAllocation& a, size_t bytes, bool control,
                         Pages pages) {
  int p = ctx.size(), me = ctx.rank();
  a.regions[me] = Region::create(bytes, pages);
  if (control) new (a.data(me)) ControlBlock{};
  std::vector<RegionIdentity> ids(p);
  ids[me] = a.regions[me].identity();
  std::vector<size_t> counts(p, sizeof(RegionIdentity));
  allgatherv_ring(ctx, &ids[me], ids.data(), counts, DataType::kUInt8);
  for (int r = 0; r < p; ++r) {
    CHORUS_CHECK_ARG(ids[r].data_bytes == ids[0].data_bytes, "alloc_shared: rank ", r,
                     " asked for ", ids[r].data_bytes, " bytes, rank 0 for ", ids[0].data_bytes);
  }
  // Where a rank cannot open or map a peer's file (no /proc, a header other than announced),
  // every rank falls back to its own memory: agreed like the single-copy probe.
  int64_t ok = 1;  // 8 bytes keep the links' streams aligned
  std::string why;
  for (int r = 0; r < p && ok == 1; ++r) {
    if (r == me) continue;
    try {
      transport::PeerMemory* memory = ctx.link(r).peer_memory();
      if (memory == nullptr) CHORUS_THROW(IoError, ctx.link(r).describe(), " has no peer memory");
      net::Fd file(memory->open_file(ids[r].fd));
      a.regions[r] = Region::map_peer(std::move(file), ids[r], pages);
    } catch (const IoError& e) {  // AuthError included
      ok = 0;
      why = e.what();
    }
  }
  // Also a barrier: past it, every peer has opened this rank's file or given up.
  allreduce_recursive_doubling(ctx, &ok, &ok, 1, DataType::kInt64, ReduceOp::kMin);
  a.regions[me].close_descriptor();
  if (ok == 1) return true;
  if (!why.empty()) {
    CHORUS_LOG(kWarning, "comm") << "rank " << me << ": alloc_shared gives every rank memory of "
                                 << "its own: " << why;
  }
  for (int r = 0; r < p; ++r) {
    if (r != me) a.regions[r] = Region();
  }
  return false;
}

void SharedMemory::locate(const void* p, size_t bytes, uint64_t* id, uint64_t* offset) const {
  *id = 0;
  *offset = 0;
  auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(allocations_mu_);
  for (const auto& weak : allocations_) {
    auto a = weak.lock();
    if (!a) continue;
    auto base = reinterpret_cast<uintptr_t>(a->data(a->rank));
    if (at >= base && at - base <= a->bytes() && bytes <= a->bytes() - (at - base)) {
      *id = a->id;
      *offset = at - base;
      return;
    }
  }
}

void SharedMemory::resolve(const Call& call, int r, size_t bytes) {
  auto find = [&](uint64_t id, uint64_t offset) -> char* {
    std::shared_ptr<SharedAllocation> a;
    {
      std::lock_guard<std::mutex> lock(allocations_mu_);
      if (id >= 1 && id <= allocations_.size()) a = allocations_[id - 1].lock();
    }
    if (!a || a->id == 0) {  // gone, or unshared
      CHORUS_THROW(IoError, "rank ", r, "'s allreduce buffer is in shared allocation ", id,
                   ", which rank ", control_->rank, " no longer has");
    }
    if (offset > a->bytes() || bytes > a->bytes() - offset) {
      CHORUS_THROW(IoError, "rank ", r,
                   " posted an allreduce buffer past the end of shared "
                   "allocation ",
                   id);
    }
    held_.push_back(a);
    return a->data(r) + offset;
  };
  src_[r] = find(call.send_id, call.send_offset);
  dst_[r] = find(call.recv_id, call.recv_offset);
}

bool SharedMemory::handshake(Context& ctx, const void* send, void* recv, size_t count,
                             DataType type, ReduceOp op) {
  size_t bytes = count * dtype_size(type);
  int p = ctx.size(), me = ctx.rank();
  uint64_t call = ++calls_;
  ControlBlock& mine = control_block(*control_, me);
  Call& posted = mine.calls[call % 2];
  locate(send, bytes, &posted.send_id, &posted.send_offset);
  locate(recv, bytes, &posted.recv_id, &posted.recv_offset);
  posted.count = count;
  posted.type = static_cast<uint32_t>(type);
  posted.op = static_cast<uint32_t>(op);
  mine.entered.store(call, std::memory_order_release);
  wait_all(ctx, call, false);

  bool everywhere = true;
  for (int r = 0; r < p; ++r) {
    const Call& c = control_block(*control_, r).calls[call % 2];
    if (c.count != count || c.type != posted.type || c.op != posted.op) {
      CHORUS_THROW(InvalidArgument, "allreduce: rank ", r, " passed ", describe_call(c),
                   " but rank ", me, " passed ", describe_call(posted));
    }
    everywhere = everywhere && c.send_id != 0 && c.recv_id != 0;
  }
  return everywhere;
}

void SharedMemory::run(Context& ctx, size_t count, DataType type, ReduceOp op) {
  int p = ctx.size(), me = ctx.rank();
  size_t bytes = count * dtype_size(type);
  uint64_t call = calls_;
  ControlBlock& mine = control_block(*control_, me);
  src_.assign(p, nullptr);
  dst_.assign(p, nullptr);
  held_.clear();
  for (int r = 0; r < p; ++r) resolve(control_block(*control_, r).calls[call % 2], r, bytes);
  reduce_part(ctx, count, type, op);
  held_.clear();
  mine.finished.store(call, std::memory_order_release);
  wait_all(ctx, call, true);
  completed_.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// out[0, n) = op over ranks of src[r][at, at + n), rank 0's value first, then rank 1's, ...
// REQUIRES: out is none of src[2..p) (it may be src[0] or src[1]: reduce_pair allows that).
void reduce_across(DataType type, ReduceOp op, const std::vector<const char*>& src, size_t at,
                   size_t n, char* out) {
  const int p = static_cast<int>(src.size());
  if (op == ReduceOp::kAverage && p == 2) {
    reduce_pair_divided(type, op, out, src[0] + at, src[1] + at, n, p);
    return;
  }
  reduce_pair(type, op, out, src[0] + at, src[1] + at, n);
  for (int r = 2; r < p; ++r) reduce_into(type, op, out, src[r] + at, n);
  if (op == ReduceOp::kAverage) divide(type, out, n, p);
}

}  // namespace

void SharedMemory::reduce_part(Context& ctx, size_t count, DataType type, ReduceOp op) {
  int p = ctx.size(), me = ctx.rank();
  size_t es = dtype_size(type);
  size_t begin = part_offset(count, p, me) * es, end = begin + part_count(count, p, me) * es;
  size_t footprint = 0;
  for (int r = 0; r < p; ++r) footprint += (src_[r] == dst_[r] ? 1 : 2) * count * es;
  bool streaming = footprint > kStreamingMinFootprint;
  // Each block is made in this rank's own output, through the cache, and copied from there
  // to the others' while it is in L1; in place, its lines were just read. Scratch in L1
  // comes first only where the own output cannot take it: streamed (apart from its input,
  // past the cache), or in place on rank 2 or more, whose input is read after ranks 0 and
  // 1's (reduce_across). Making it in the own output ran 1.1-1.4x faster (2 ranks;
  // docs/algorithms.md).
  const bool apart = dst_[me] != src_[me];
  const bool own = apart ? !streaming : me < 2;
  size_t block = kBlockBytes / es * es;
  char* scratch = own ? nullptr : ctx.ws.incoming.get(block);
  for (size_t at = begin; at < end; at += block) {
    size_t n = std::min(block, end - at) / es;
    char* out = own ? dst_[me] + at : scratch;
    reduce_across(type, op, src_, at, n, out);
    for (int r = 0; r < p; ++r) {
      if (own && r == me) continue;
      if (streaming && dst_[r] != src_[r]) {
        copy_streaming(dst_[r] + at, out, n * es);
      } else {
        std::memcpy(dst_[r] + at, out, n * es);
      }
    }
  }
}

void SharedMemory::wait_all(Context& ctx, uint64_t call, bool finished) {
  int p = ctx.size();
  std::vector<transport::Link*> links;
  int waiting_for = -1;
  auto ready = [&] {
    for (int r = 0; r < p; ++r) {
      ControlBlock& b = control_block(*control_, r);
      if ((finished ? b.finished : b.entered).load(std::memory_order_acquire) < call) {
        if (r != waiting_for) {
          waiting_for = r;
          links.assign(1, &ctx.link(r));
        }
        return false;
      }
    }
    return true;
  };
  if (ready()) return;
  ctx.progress.wait_until(ready, links, [&] {
    return std::string("waiting for rank ") + std::to_string(waiting_for) + " to " +
           (finished ? "finish" : "enter") + " the allreduce in shared memory";
  });
}

}  // namespace chorus::comm

namespace chorus {

void* SharedBuffer::data() const {
  return allocation_ ? allocation_->data(allocation_->rank) : nullptr;
}
size_t SharedBuffer::size() const { return allocation_ ? allocation_->bytes() : 0; }
bool SharedBuffer::shared() const { return allocation_ && allocation_->id != 0; }

void SharedBuffer::unshare() {
  if (!allocation_) return;
  // locate() no longer finds it; the shared memory's handshake then takes the usual path.
  allocation_->id = 0;
  for (size_t r = 0; r < allocation_->regions.size(); ++r) {
    if (static_cast<int>(r) != allocation_->rank) {
      allocation_->regions[r] = transport::shm::Region();
    }
  }
}

}  // namespace chorus
