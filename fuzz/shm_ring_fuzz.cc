// A shared-memory ring whose peer writes counters no honest peer would: the input is a
// script of one-byte operations on both ends of one ring, interleaved with the hostile
// peer's stores to the counter it owns. Every copy must stay inside the ring's bytes (ASan
// watches a buffer of exactly the capacity), and a counter pair no ring can have must be an
// IoError, never bytes handed out that nobody wrote.
#include <memory>
#include <vector>

#include "fuzz_support.h"
#include "transport/shm/shm_ring.h"

namespace chorus::fuzz {
namespace {

using transport::shm::RingCounters;
using transport::shm::RingReader;
using transport::shm::RingWriter;

class Script {
 public:
  Script(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// Small counters near the honest ones, or any 64-bit value.
uint64_t counter(Script& s, uint64_t near) {
  uint8_t how = s.byte();
  if (how & 0x80) return s.u64();
  return near + (how & 0x3f) - 32;
}

void run(Script& s) {
  const uint64_t capacity = uint64_t{1} << (12 + s.byte() % 3);  // 4..16 KiB
  auto counters = std::make_unique<RingCounters>();
  std::vector<char> ring(capacity), buf(3 * capacity);
  RingWriter writer(counters.get(), ring.data(), capacity);
  RingReader reader(counters.get(), ring.data(), capacity);
  while (!s.done()) {
    uint8_t op = s.byte();
    size_t n = (static_cast<size_t>(s.byte()) << 8 | s.byte()) % buf.size();
    size_t available = 0;
    switch (op % 6) {
      case 0:  // a hostile writer publishes a head
        counters->head.store(counter(s, counters->head.load()));
        break;
      case 1:  // a hostile reader publishes a tail
        counters->tail.store(counter(s, counters->tail.load()));
        break;
      case 2:
        writer.write(buf.data(), n);
        break;
      case 3:
        reader.read(buf.data(), n);
        break;
      case 4: {
        char* p = writer.reserve(&available);
        n = std::min(n, available);
        std::memset(p, 0x5a, n);
        writer.commit(n);
        break;
      }
      case 5: {
        const char* p = reader.peek(&available);
        n = std::min(n, available);
        std::memcpy(buf.data(), p, n);
        reader.consume(n);
        break;
      }
    }
  }
}

}  // namespace
}  // namespace chorus::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorus::fuzz::Script script(data, size);
  chorus::fuzz::expect_chorus_errors([&] { chorus::fuzz::run(script); });
  return 0;
}
