#include "util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "util/byte_order.h"

namespace chorus {
namespace crc32c_detail {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, bit-reversed

// kTable[0] is the classic byte-at-a-time table; kTable[k][b] is the CRC of byte b
// followed by k zero bytes, which lets the loop fold 8 bytes with 8 independent lookups.
struct Tables {
  uint32_t t[8][256];
  constexpr Tables() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][i] = c;
    }
    for (int k = 1; k < 8; ++k) {
      for (int i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    }
  }
};
constexpr Tables kTables;

}  // namespace

uint32_t extend_table(uint32_t crc, const void* data, size_t n) {
  const auto& t = kTables.t;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo = c ^ byte_order::load_u32(p);
    uint32_t hi = byte_order::load_u32(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
  return ~c;
}

#if defined(__x86_64__)
bool hw_available() { return __builtin_cpu_supports("sse4.2"); }

// One crc32 instruction per 8 bytes; bytes up to an 8-byte boundary and the tail go
// one at a time so the 64-bit loads are aligned.
__attribute__((target("sse4.2"))) uint32_t extend_hw(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return ~c;
}
#else
bool hw_available() { return false; }
uint32_t extend_hw(uint32_t crc, const void* data, size_t n) { return extend_table(crc, data, n); }
#endif

}  // namespace crc32c_detail

// Chosen on first use (a function-local static), so calls from other static
// initialisers are safe.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);
  static const ExtendFn extend =
      crc32c_detail::hw_available() ? crc32c_detail::extend_hw : crc32c_detail::extend_table;
  return extend(crc, data, n);
}

}  // namespace chorus
