// CRC-32C: published vectors, the SSE4.2 and table paths against each other, extend().
#include "util/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace chorus {
namespace {

uint32_t crc_of(const std::vector<uint8_t>& v) { return crc32c(v.data(), v.size()); }

// RFC 3720 (iSCSI) appendix B.4, through the dispatched path and the table path.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  const std::vector<std::pair<std::vector<uint8_t>, uint32_t>> vectors = {
      {std::vector<uint8_t>(32, 0x00), 0x8A9136AAu},
      {std::vector<uint8_t>(32, 0xFF), 0x62A8AB43u},
      {up, 0x46DD794Eu},
      {down, 0x113FDB5Cu}};
  for (const auto& [bytes, expected] : vectors) {
    EXPECT_EQ(crc_of(bytes), expected);
    EXPECT_EQ(crc32c_detail::extend_table(0, bytes.data(), bytes.size()), expected);
  }
}

// The standard check value; zlib's CRC-32 of the same string is 0xCBF43926.
TEST(Crc32cTest, CheckString) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_detail::extend_table(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, MaskMatchesHandComputation) {
  // 0xE3069283 >> 15 = 0x0001C60D; (0xE3069283 << 17) mod 2^32 = 0x25060000;
  // rotated = 0x2507C60D; + 0xA282EAD8 = 0xC78AB0E5.
  EXPECT_EQ(crc32c_mask(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(crc32c_mask(0), 0xA282EAD8u);
  std::mt19937 rng(1);
  for (int i = 0; i < 1000; ++i) {
    uint32_t c = rng();
    EXPECT_EQ(crc32c_unmask(crc32c_mask(c)), c);
    EXPECT_NE(crc32c_mask(c), c);
  }
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Crc32cTest, HardwareAgreesWithTable) {
  if (!crc32c_detail::hw_available()) GTEST_SKIP() << "CPU without SSE4.2";
  const auto buf = random_bytes((1 << 16) + 64, 7);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {1023, 1024, 1025, 4096, 65535, 65536}) lengths.push_back(n);
  for (size_t align = 0; align < 8; ++align) {
    for (size_t n : lengths) {
      const uint8_t* p = buf.data() + align;
      ASSERT_EQ(crc32c_detail::extend_hw(0, p, n), crc32c_detail::extend_table(0, p, n))
          << "length " << n << " alignment " << align;
      ASSERT_EQ(crc32c_detail::extend_hw(0xdeadbeef, p, n),
                crc32c_detail::extend_table(0xdeadbeef, p, n))
          << "length " << n << " alignment " << align;
    }
  }
}

TEST(Crc32cTest, ExtendEqualsOneShot) {
  const auto buf = random_bytes(1000, 3);
  const uint32_t whole = crc_of(buf);
  for (size_t split = 0; split <= buf.size(); split += 7) {
    uint32_t c = crc32c(buf.data(), split);
    EXPECT_EQ(crc32c_extend(c, buf.data() + split, buf.size() - split), whole) << split;
    uint32_t t = crc32c_detail::extend_table(0, buf.data(), split);
    EXPECT_EQ(crc32c_detail::extend_table(t, buf.data() + split, buf.size() - split), whole);
  }
}

TEST(Crc32cTest, DetectsEveryFlippedBit) {
  auto buf = random_bytes(64, 5);
  const uint32_t good = crc_of(buf);
  for (size_t bit = 0; bit < buf.size() * 8; ++bit) {
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(crc_of(buf), good) << bit;
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace chorus
