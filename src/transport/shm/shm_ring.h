// A single-producer/single-consumer byte ring in shared memory. The producer owns `head`
// (bytes ever written), the consumer owns `tail` (bytes ever read); each sits on its own
// cache line so the two sides never write the same line. The writer publishes with a
// release store after copying, the reader observes with an acquire load before copying:
// that pair is the only synchronisation, so the hot path has no system call, no lock and no
// allocation. Each side caches the other's counter and reloads it only when the cached
// value says the ring is full (writer) or empty (reader). After each publication a side rings
// the peer's doorbell if the peer sleeps (doorbell.h): no system call while both are awake.
//
// The peer's counter is not trusted: after every load, head - tail must lie in
// [0, capacity] (unsigned, so a tail beyond the head fails too). Otherwise the ring throws
// IoError instead of copying past its end or handing out bytes nobody wrote.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/shm/doorbell.h"

namespace chorus::transport::shm {

struct RingCounters {
  alignas(kCacheLine) std::atomic<uint64_t> head{0};
  alignas(kCacheLine) std::atomic<uint64_t> tail{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory rings need address-free atomics");

// Copies are published every kPublishChunk bytes so that the reader can start on the first
// chunk of a large message while the writer is still copying the rest (pipelining).
constexpr size_t kPublishChunk = 128 << 10;

// Throws IoError: the peer published counters no ring can have.
[[noreturn]] void throw_corrupt_ring(uint64_t head, uint64_t tail, uint64_t capacity);

// Bytes written and not yet read, checked.
inline uint64_t ring_used(uint64_t head, uint64_t tail, uint64_t capacity) {
  const uint64_t used = head - tail;
  if (used > capacity) throw_corrupt_ring(head, tail, capacity);
  return used;
}

class RingWriter {
 public:
  RingWriter() = default;
  // REQUIRES: capacity is a power of two; data has capacity bytes. `peer` (may be null) is
  // the reader's doorbell, rung when it sleeps and new bytes are published.
  RingWriter(RingCounters* counters, char* data, uint64_t capacity, Doorbell* peer = nullptr)
      : counters_(counters), data_(data), capacity_(capacity), peer_(peer) {
    head_ = counters->head.load(std::memory_order_relaxed);
    reload_tail();
  }

  // Copies up to n bytes into the ring; returns how many (0 when it is full).
  size_t write(const void* src, size_t n) {
    uint64_t free_bytes = capacity_ - (head_ - tail_cache_);
    if (free_bytes < n) free_bytes = capacity_ - reload_tail();
    n = static_cast<size_t>(std::min<uint64_t>(n, free_bytes));
    const char* from = static_cast<const char*>(src);
    for (size_t done = 0; done < n;) {
      size_t piece = std::min(n - done, kPublishChunk);
      copy_in(from + done, piece);
      done += piece;
      head_ += piece;
      counters_->head.store(head_, std::memory_order_release);
      wake_if_sleeping(peer_);
    }
    return n;
  }

  // Zero-copy write: the free bytes that are contiguous in memory (they stop at the wrap
  // point), in place, for the caller to fill; commit() then publishes the first n of them.
  char* reserve(size_t* available) {
    const uint64_t free_bytes = capacity_ - reload_tail();
    size_t at = static_cast<size_t>(head_ & (capacity_ - 1));
    *available = static_cast<size_t>(std::min<uint64_t>(free_bytes, capacity_ - at));
    return data_ + at;
  }
  // REQUIRES: n <= what reserve() reported, and those bytes written.
  void commit(size_t n) {
    head_ += n;
    counters_->head.store(head_, std::memory_order_release);
    wake_if_sleeping(peer_);
  }

  // Whether write() would accept a byte now (reloads the reader's counter).
  bool has_space() { return reload_tail() < capacity_; }

 private:
  uint64_t reload_tail() {
    tail_cache_ = counters_->tail.load(std::memory_order_acquire);
    return ring_used(head_, tail_cache_, capacity_);
  }

  void copy_in(const char* src, size_t n) {
    size_t at = static_cast<size_t>(head_ & (capacity_ - 1));
    size_t first = std::min<size_t>(n, capacity_ - at);
    std::memcpy(data_ + at, src, first);
    if (first < n) std::memcpy(data_, src + first, n - first);
  }

  RingCounters* counters_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
  Doorbell* peer_ = nullptr;
  uint64_t head_ = 0;
  uint64_t tail_cache_ = 0;
};

class RingReader {
 public:
  RingReader() = default;
  // `peer` (may be null) is the writer's doorbell, rung when it sleeps and space is freed.
  RingReader(RingCounters* counters, const char* data, uint64_t capacity, Doorbell* peer = nullptr)
      : counters_(counters), data_(data), capacity_(capacity), peer_(peer) {
    tail_ = counters->tail.load(std::memory_order_relaxed);
    reload_head();
  }

  // Copies up to n bytes out of the ring; returns how many (0 when it is empty).
  size_t read(void* dst, size_t n) {
    uint64_t avail = head_cache_ - tail_;
    if (avail < n) avail = reload_head();
    n = static_cast<size_t>(std::min<uint64_t>(n, avail));
    char* to = static_cast<char*>(dst);
    for (size_t done = 0; done < n;) {
      size_t piece = std::min(n - done, kPublishChunk);
      copy_out(to + done, piece);
      done += piece;
      release(piece);
    }
    return n;
  }

  // Zero-copy read: the readable bytes that are contiguous in memory (they stop at the wrap
  // point), in place. They stay valid and unchanged until consume() hands them back.
  const char* peek(size_t* available) {
    const uint64_t used = reload_head();
    size_t at = static_cast<size_t>(tail_ & (capacity_ - 1));
    *available = static_cast<size_t>(std::min<uint64_t>(used, capacity_ - at));
    return data_ + at;
  }
  // REQUIRES: n <= what peek() reported.
  void consume(size_t n) { release(n); }

  // Whether read() would return a byte now. Throws IoError for counters no ring can have.
  bool has_data() const {
    return ring_used(counters_->head.load(std::memory_order_acquire), tail_, capacity_) != 0;
  }

 private:
  uint64_t reload_head() {
    head_cache_ = counters_->head.load(std::memory_order_acquire);
    return ring_used(head_cache_, tail_, capacity_);
  }

  // The release store orders our reads of the bytes before the writer's reuse of them.
  void release(size_t n) {
    tail_ += n;
    counters_->tail.store(tail_, std::memory_order_release);
    wake_if_sleeping(peer_);
  }

  void copy_out(char* dst, size_t n) {
    size_t at = static_cast<size_t>(tail_ & (capacity_ - 1));
    size_t first = std::min<size_t>(n, capacity_ - at);
    std::memcpy(dst, data_ + at, first);
    if (first < n) std::memcpy(dst + first, data_, n - first);
  }

  RingCounters* counters_ = nullptr;
  const char* data_ = nullptr;
  uint64_t capacity_ = 0;
  Doorbell* peer_ = nullptr;
  uint64_t tail_ = 0;
  uint64_t head_cache_ = 0;
};

}  // namespace chorus::transport::shm
