#include "torch/shared_heap.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "torch/gradient_buckets.h"
#include "util/block_arena.h"
#include "util/env.h"
#include "util/log.h"

namespace chorus::detail {
namespace {

// Blocks are whole pages: the allreduce's streams and vector loads stay aligned, and a
// tensor never shares a page with another.
constexpr size_t kGranule = 4096;

struct Heap {
  explicit Heap(SharedBuffer m)
      : memory(std::move(m)),
        base(static_cast<char*>(memory.data())),
        arena(memory.size(), kGranule) {}
  bool contains(const void* p) const {
    auto at = static_cast<const char*>(p);
    return at >= base && at < base + memory.size();
  }

  SharedBuffer memory;
  char* base;
  BlockArena arena;
  bool retired = false;
};

struct HeapState {
  std::mutex mu;
  // The current heap last; retired ones stay while tensors live in them.
  std::vector<std::unique_ptr<Heap>> heaps;
  // The allocator we stand in front of; read without the lock by allocations and frees.
  std::atomic<c10::Allocator*> before{nullptr};
  bool forked_child = false;
};

HeapState& state() {
  static auto* s = new HeapState;  // never destroyed: tensors may die during exit
  return *s;
}

Heap* current_heap(HeapState& s) {
  if (s.forked_child || s.heaps.empty() || s.heaps.back()->retired) return nullptr;
  return s.heaps.back().get();
}

void free_block(void* p);

class SharedHeapAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    HeapState& s = state();
    if (n >= kSharedHeapMinBytes) {
      std::lock_guard<std::mutex> lock(s.mu);
      Heap* heap = current_heap(s);
      if (heap != nullptr) {
        if (auto offset = heap->arena.allocate(n)) {
          char* p = heap->base + *offset;
          return {p, p, &free_block, c10::Device(c10::DeviceType::CPU)};
        }
      }
    }
    return s.before.load()->allocate(n);
  }
  // raw_allocate()'s pointers come back here; those of the allocator before go back to it.
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
};

SharedHeapAllocator& allocator() {
  static auto* a = new SharedHeapAllocator;
  return *a;
}

void free_block(void* p) {
  HeapState& s = state();
  std::unique_ptr<Heap> gone;  // unmapped outside the lock
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (size_t i = 0; i < s.heaps.size(); ++i) {
      Heap& heap = *s.heaps[i];
      if (!heap.contains(p)) continue;
      if (!heap.arena.release(static_cast<char*>(p) - heap.base)) {
        CHORUS_LOG(kError, "torch") << "shared heap: freeing " << p << ", not a live block";
        ::abort();  // the tensor bookkeeping is corrupt: going on would corrupt memory
      }
      if (heap.retired && heap.arena.live_blocks() == 0) {
        gone = std::move(s.heaps[i]);
        s.heaps.erase(s.heaps.begin() + static_cast<std::ptrdiff_t>(i));
      }
      return;
    }
  }
  c10::DeleterFnPtr before = s.before.load()->raw_deleter();
  if (before != nullptr) before(p);
}

size_t host_memory_bytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

void install_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork([] { state().mu.lock(); }, [] { state().mu.unlock(); },
                     [] {
                       state().forked_child = true;
                       state().mu.unlock();
                     });
  });
}

}  // namespace

void start_shared_heap(Communicator& world) {
  if (world.size() < 2 || world.local_size() != world.size()) return;
  if (env_int_or("CHORUS_SHARED_HEAP", 1) == 0) return;
  const size_t bytes = host_memory_bytes();
  if (bytes == 0) return;
  SharedBuffer memory;
  try {
    memory = world.alloc_shared(bytes, SharedPages::kOnTouch);
  } catch (const IoError& e) {  // no room for the mapping (a ulimit -v, say): no heap
    CHORUS_LOG(kWarning, "torch") << "no shared heap: " << e.what();
    return;
  }
  if (!memory.shared()) return;
  install_fork_handler();
  HeapState& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.heaps.push_back(std::make_unique<Heap>(std::move(memory)));
  }
  c10::Allocator* now = c10::GetCPUAllocator();
  if (now != &allocator()) {
    s.before = now;
    c10::SetCPUAllocator(&allocator(), 0);  // 0: the default's priority, which may be replaced
  }
  if (c10::GetCPUAllocator() != &allocator()) {  // an allocator of higher priority stays
    CHORUS_LOG(kInfo, "torch") << "shared heap unused: another CPU allocator is installed";
    retire_shared_heap();
    return;
  }
  CHORUS_LOG(kDebug, "torch") << "shared heap of " << bytes << " bytes";
}

void retire_shared_heap() {
  HeapState& s = state();
  std::unique_ptr<Heap> gone;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Heap* heap = current_heap(s);
    if (heap == nullptr) return;
    heap->retired = true;
    heap->memory.unshare();
    if (heap->arena.live_blocks() == 0) {
      gone = std::move(s.heaps.back());
      s.heaps.pop_back();
    }
  }
  // Tensors in retired heaps still come back to our deleter, which stays installed for
  // them; new ones go where they went before.
  if (c10::GetCPUAllocator() == &allocator()) c10::SetCPUAllocator(s.before.load(), 0);
}

bool shared_heap_active() {
  HeapState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return current_heap(s) != nullptr;
}

size_t in_place_min_bytes(bool on_world) {
  return on_world && shared_heap_active() ? kInPlaceMinBytes : 0;
}

}  // namespace chorus::detail
