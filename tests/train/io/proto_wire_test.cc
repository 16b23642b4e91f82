// The hand-written protobuf wire format: varint encodings from the protobuf
// documentation, and the reader's limits on hostile input.
#include "train/io/proto_wire.h"

#include <gtest/gtest.h>

#include <random>

#include "chorus/error.h"
#include "io_test_util.h"

namespace chorus::io::proto {
namespace {

using chorus::testing::hex;

std::string varint_hex(uint64_t v) {
  std::string out;
  put_varint(out, v);
  return hex(out);
}

TEST(ProtoWireTest, VarintEncodings) {
  EXPECT_EQ(varint_hex(0), "00");
  EXPECT_EQ(varint_hex(1), "01");
  EXPECT_EQ(varint_hex(127), "7f");
  EXPECT_EQ(varint_hex(128), "8001");
  EXPECT_EQ(varint_hex(150), "9601");  // the documentation's example: 08 96 01
  EXPECT_EQ(varint_hex(300), "ac02");
  EXPECT_EQ(varint_hex(~uint64_t{0}), "ffffffffffffffffff01");
  std::string field;
  put_int64_field(field, 1, -1);  // int64 -1: ten bytes, no zigzag
  EXPECT_EQ(hex(field), "08ffffffffffffffffff01");
}

TEST(ProtoWireTest, FieldsRoundTrip) {
  std::mt19937_64 rng(11);
  std::string msg;
  std::vector<uint64_t> values;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = rng() >> (rng() % 64);
    values.push_back(v);
    put_varint_field(msg, 1 + i % 5000, v);
  }
  put_double_field(msg, 7, -0.125);
  put_float_field(msg, 536870911, 3.5f);  // the largest field number
  put_bytes_field(msg, 9, std::string(300, 'z'));
  Reader r(msg, "test");
  Field f;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(r.next(f));
    EXPECT_EQ(f.number, static_cast<uint32_t>(1 + i % 5000));
    EXPECT_EQ(f.type, kVarint);
    EXPECT_EQ(f.value, values[i]);
  }
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.type, kFixed64);
  EXPECT_EQ(f.as_double(), -0.125);
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.number, 536870911u);
  EXPECT_EQ(f.as_float(), 3.5f);
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.bytes, std::string(300, 'z'));
  EXPECT_FALSE(r.next(f));
}

void expect_malformed(const std::string& bytes, const std::string& why) {
  Reader r(bytes, "ctx");
  Field f;
  try {
    while (r.next(f)) {
    }
    ADD_FAILURE() << "accepted " << hex(bytes);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ctx: malformed protobuf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(ProtoWireTest, HostileInput) {
  expect_malformed("\x08", "truncated varint");
  expect_malformed("\x08\x80", "truncated varint");
  expect_malformed("\x08" + std::string(10, '\xff') + "\x01", "longer than 10 bytes");
  expect_malformed(
      "\x0a\x05"
      "abc",
      "length 5 exceeds the 3 bytes left");
  // A length of 2^63: must not wrap around when added to the position.
  expect_malformed("\x0a" + std::string(8, '\x80') + "\x80\x01" + "abc", "exceeds");
  expect_malformed(std::string("\x0d\x00\x00", 3), "truncated fixed32");
  expect_malformed(std::string("\x09\x00", 2), "truncated fixed64");
  expect_malformed("\x0b", "unsupported wire type 3");
  expect_malformed("\x0f", "unsupported wire type 7");
  expect_malformed(std::string("\x00", 1), "invalid field number 0");
  expect_malformed("\xf8\xff\xff\xff\xff\x01", "invalid field number");  // above 2^29 - 1
}

}  // namespace
}  // namespace chorus::io::proto
