// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord files
// and iSCSI. Not zlib's crc32 (polynomial 0xEDB88320): the two give different values.
// Uses the SSE4.2 crc32 instruction when the CPU has it (chosen once at start-up), a
// slicing-by-8 table otherwise. Pure functions: any thread may call them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

// The CRC of `n` bytes that followed data whose CRC was `crc`:
// crc32c_extend(crc32c(a), b) == crc32c(a + b). crc32c_extend(0, p, n) == crc32c(p, n).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// TFRecord stores CRCs masked, as a CRC of data that contains CRCs is weak.
inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t crc32c_unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

namespace crc32c_detail {
// The two implementations, for tests. extend_hw requires hw_available().
bool hw_available();
uint32_t extend_table(uint32_t crc, const void* data, size_t n);
uint32_t extend_hw(uint32_t crc, const void* data, size_t n);
}  // namespace crc32c_detail

}  // namespace chorus
