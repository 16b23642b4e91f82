// A single-producer/single-consumer byte ring in shared memory. The producer owns `head`
// (bytes ever written), the consumer owns `tail` (bytes ever read); each sits on its own
// cache line so the two sides never write the same line. The writer publishes with a
// release store after copying, the reader observes with an acquire load before copying:
// that pair is the only synchronisation, so the hot path has no system call, no lock and no
// allocation. Each side caches the other's counter and reloads it only when the cached
// value says the ring is full (writer) or empty (reader).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace chorus::transport::shm {

constexpr size_t kCacheLine = 64;

struct RingCounters {
  alignas(kCacheLine) std::atomic<uint64_t> head{0};
  alignas(kCacheLine) std::atomic<uint64_t> tail{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory rings need address-free atomics");

// Copies are published every kPublishChunk bytes so that the reader can start on the first
// chunk of a large message while the writer is still copying the rest (pipelining).
constexpr size_t kPublishChunk = 128 << 10;

class RingWriter {
 public:
  RingWriter() = default;
  // REQUIRES: capacity is a power of two; data has capacity bytes.
  RingWriter(RingCounters* counters, char* data, uint64_t capacity)
      : counters_(counters), data_(data), capacity_(capacity) {
    head_ = counters->head.load(std::memory_order_relaxed);
    tail_cache_ = counters->tail.load(std::memory_order_acquire);
  }

  // Copies up to n bytes into the ring; returns how many (0 when it is full).
  size_t write(const void* src, size_t n) {
    uint64_t free_bytes = capacity_ - (head_ - tail_cache_);
    if (free_bytes < n) {
      tail_cache_ = counters_->tail.load(std::memory_order_acquire);
      free_bytes = capacity_ - (head_ - tail_cache_);
    }
    n = static_cast<size_t>(std::min<uint64_t>(n, free_bytes));
    const char* from = static_cast<const char*>(src);
    for (size_t done = 0; done < n;) {
      size_t piece = std::min(n - done, kPublishChunk);
      copy_in(from + done, piece);
      done += piece;
      head_ += piece;
      counters_->head.store(head_, std::memory_order_release);
    }
    return n;
  }

 private:
  void copy_in(const char* src, size_t n) {
    size_t at = static_cast<size_t>(head_ & (capacity_ - 1));
    size_t first = std::min<size_t>(n, capacity_ - at);
    std::memcpy(data_ + at, src, first);
    if (first < n) std::memcpy(data_, src + first, n - first);
  }

  RingCounters* counters_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;
  uint64_t tail_cache_ = 0;
};

class RingReader {
 public:
  RingReader() = default;
  RingReader(RingCounters* counters, const char* data, uint64_t capacity)
      : counters_(counters), data_(data), capacity_(capacity) {
    tail_ = counters->tail.load(std::memory_order_relaxed);
    head_cache_ = counters->head.load(std::memory_order_acquire);
  }

  // Copies up to n bytes out of the ring; returns how many (0 when it is empty).
  size_t read(void* dst, size_t n) {
    uint64_t avail = head_cache_ - tail_;
    if (avail < n) {
      head_cache_ = counters_->head.load(std::memory_order_acquire);
      avail = head_cache_ - tail_;
    }
    n = static_cast<size_t>(std::min<uint64_t>(n, avail));
    char* to = static_cast<char*>(dst);
    for (size_t done = 0; done < n;) {
      size_t piece = std::min(n - done, kPublishChunk);
      copy_out(to + done, piece);
      done += piece;
      tail_ += piece;
      counters_->tail.store(tail_, std::memory_order_release);
    }
    return n;
  }

 private:
  void copy_out(char* dst, size_t n) {
    size_t at = static_cast<size_t>(tail_ & (capacity_ - 1));
    size_t first = std::min<size_t>(n, capacity_ - at);
    std::memcpy(dst, data_ + at, first);
    if (first < n) std::memcpy(dst + first, data_, n - first);
  }

  RingCounters* counters_ = nullptr;
  const char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;
  uint64_t head_cache_ = 0;
};

}  // namespace chorus::transport::shm
