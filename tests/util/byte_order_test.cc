#include "util/byte_order.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "chorus/error.h"

namespace chorus::byte_order {
namespace {

TEST(ByteOrder, PutWritesLittleEndianBytes) {
  std::string out;
  put_u8(out, 0x01);
  put_u16(out, 0x0302);
  put_u32(out, 0x07060504);
  put_u64(out, 0x0f0e0d0c0b0a0908);
  const std::string want("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f", 15);
  EXPECT_EQ(out, want);
  std::string neg;
  put_i32(neg, -2);
  put_i64(neg, -1);
  EXPECT_EQ(neg, std::string("\xfe\xff\xff\xff") + std::string(8, '\xff'));
  std::string f;
  put_f32(f, 1.0f);  // 0x3f800000
  put_f64(f, -2.0);  // 0xc000000000000000
  EXPECT_EQ(f, std::string("\x00\x00\x80\x3f", 4) + std::string("\0\0\0\0\0\0\0\xc0", 8));
}

TEST(ByteOrder, StoreAndLoadFixedBuffers) {
  uint8_t b[8];
  store_u16(b, 0xbeef);
  EXPECT_EQ(b[0], 0xef);
  EXPECT_EQ(load_u16(b), 0xbeef);
  store_u32(b, 0xdeadbeef);
  EXPECT_EQ(b[0], 0xef);
  EXPECT_EQ(b[3], 0xde);
  EXPECT_EQ(load_u32(b), 0xdeadbeefu);
  EXPECT_EQ(load_u32_be(b), 0xefbeaddeu);
  store_u64(b, 0x0123456789abcdefull);
  EXPECT_EQ(b[0], 0xef);
  EXPECT_EQ(b[7], 0x01);
  EXPECT_EQ(load_u64(b), 0x0123456789abcdefull);
}

TEST(ByteOrder, RoundTripsEveryType) {
  std::string out;
  put_u8(out, 255);
  put_u16(out, 65535);
  put_u32(out, 4000000000u);
  put_u64(out, std::numeric_limits<uint64_t>::max());
  put_i32(out, std::numeric_limits<int32_t>::min());
  put_i64(out, std::numeric_limits<int64_t>::min());
  put_f32(out, -0.15625f);
  put_f64(out, std::numeric_limits<double>::infinity());
  put_f64(out, std::nan(""));
  out += "tail";
  ByteReader in(out, "test");
  EXPECT_EQ(in.u8(), 255);
  EXPECT_EQ(in.u16(), 65535);
  EXPECT_EQ(in.u32(), 4000000000u);
  EXPECT_EQ(in.u64(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(in.i32(), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(in.i64(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(in.f32(), -0.15625f);
  EXPECT_EQ(in.f64(), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(in.f64()));
  EXPECT_EQ(in.left(), 4u);
  EXPECT_EQ(in.bytes(4), "tail");
  EXPECT_TRUE(in.at_end());
  in.finish();
}

// Every read on short input is an IoError naming the context, the bytes wanted, where, and
// what was left; nothing is consumed.
TEST(ByteOrder, ShortInputThrowsIoErrorNamingContext) {
  const std::string three("abc");
  auto message = [&](auto read) {
    ByteReader in(three, "ps state file");
    in.u8();
    try {
      read(in);
    } catch (const IoError& e) {
      EXPECT_EQ(in.position(), 1u);
      return std::string(e.what());
    }
    ADD_FAILURE() << "no IoError";
    return std::string();
  };
  const std::string u32 = message([](ByteReader& in) { in.u32(); });
  EXPECT_NE(u32.find("ps state file: truncated (4 bytes wanted at offset 1, 2 left)"),
            std::string::npos)
      << u32;
  EXPECT_NE(message([](ByteReader& in) { in.u64(); }).find("8 bytes wanted"), std::string::npos);
  EXPECT_NE(message([](ByteReader& in) { in.f64(); }).find("8 bytes wanted"), std::string::npos);
  EXPECT_NE(message([](ByteReader& in) { in.i32(); }).find("4 bytes wanted"), std::string::npos);
  EXPECT_NE(message([](ByteReader& in) { in.f32(); }).find("4 bytes wanted"), std::string::npos);
  EXPECT_NE(message([](ByteReader& in) { in.i64(); }).find("8 bytes wanted"), std::string::npos);
  EXPECT_NE(message([](ByteReader& in) { in.bytes(3); }).find("3 bytes wanted"), std::string::npos);
  // A huge announced length must not wrap the bounds check.
  EXPECT_NE(message([](ByteReader& in) {
              in.bytes(std::numeric_limits<size_t>::max());
            }).find("truncated"),
            std::string::npos);
  ByteReader in(three, "x");
  in.u16();
  in.u8();
  try {
    in.u8();
    ADD_FAILURE() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("x: truncated (1 bytes wanted at offset 3, 0 left)"),
              std::string::npos);
  }
}

TEST(ByteOrder, FinishRejectsTrailingBytes) {
  ByteReader in("abc", "engine message");
  in.u16();
  try {
    in.finish();
    FAIL() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("engine message: 1 trailing bytes"), std::string::npos);
  }
}

}  // namespace
}  // namespace chorus::byte_order
