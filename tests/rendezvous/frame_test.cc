// Frames and payloads (rendezvous/frame.h): encoding, and refusal of anything malformed
// before a byte is allocated for it.
#include "rendezvous/frame.h"

#include <gtest/gtest.h>

#include <cstring>

#include "chorus/error.h"
#include "test_util.h"

namespace chorus::rendezvous {
namespace {

using std::chrono::milliseconds;

std::string expect_io_error(const unsigned char* header, uint32_t max) {
  try {
    decode_header(header, max);
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "header was accepted";
  return "";
}

TEST(Frame, HeaderIsLittleEndianAndStartsWithCHRS) {
  unsigned char bytes[kFrameHeaderBytes];
  encode_header({kFrameMagic, kFrameVersion, 0x0203, 0x04050607}, bytes);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(bytes), 4), "CHRS");
  const unsigned char rest[] = {1, 0, 3, 2, 7, 6, 5, 4};
  EXPECT_EQ(std::memcmp(bytes + 4, rest, sizeof(rest)), 0);
  FrameHeader h = decode_header(bytes, 0x04050607);
  EXPECT_EQ(h.type, 0x0203);
  EXPECT_EQ(h.length, 0x04050607u);
}

TEST(Frame, DecodeRefusesBadMagicVersionAndOversizedLength) {
  unsigned char bytes[kFrameHeaderBytes];
  encode_header({0xdeadbeef, kFrameVersion, 1, 0}, bytes);
  EXPECT_NE(expect_io_error(bytes, 100).find("magic"), std::string::npos);
  encode_header({kFrameMagic, 2, 1, 0}, bytes);
  EXPECT_NE(expect_io_error(bytes, 100).find("version 2"), std::string::npos);
  encode_header({kFrameMagic, kFrameVersion, 1, 0xFFFFFFFFu}, bytes);
  EXPECT_NE(expect_io_error(bytes, 1 << 20).find("4294967295 bytes is over the limit"),
            std::string::npos);
}

TEST(Frame, RoundTripsOverASocketAndReportsCleanClose) {
  net::Fd listener = net::listen_tcp("127.0.0.1", 0);
  net::Fd a = testing::raw_connect(net::local_port(listener.get()));
  net::Fd b = net::accept_tcp(listener.get(), Deadline::after(milliseconds(5000)));
  std::string payload("bytes\0with\0nuls", 15);
  write_frame(a.get(), 42, payload, Deadline::after(milliseconds(5000)), "test");
  write_frame(a.get(), 7, "", Deadline::after(milliseconds(5000)), "test");
  Frame f;
  ASSERT_TRUE(read_frame(b.get(), 100, Deadline::after(milliseconds(5000)), "test", f));
  EXPECT_EQ(f.type, 42);
  EXPECT_EQ(f.payload, payload);
  ASSERT_TRUE(read_frame(b.get(), 100, Deadline::after(milliseconds(5000)), "test", f));
  EXPECT_EQ(f.type, 7);
  EXPECT_EQ(f.payload, "");
  a.reset();
  EXPECT_FALSE(read_frame(b.get(), 100, Deadline::after(milliseconds(5000)), "test", f));
}

TEST(Frame, StreamEndingMidFrameIsIoError) {
  net::Fd listener = net::listen_tcp("127.0.0.1", 0);
  net::Fd a = testing::raw_connect(net::local_port(listener.get()));
  net::Fd b = net::accept_tcp(listener.get(), Deadline::after(milliseconds(5000)));
  unsigned char header[kFrameHeaderBytes];
  encode_header({kFrameMagic, kFrameVersion, 1, 10}, header);
  testing::send_bytes(a.get(), std::string(reinterpret_cast<char*>(header), 12) + "abc");
  a.reset();
  Frame f;
  EXPECT_THROW(read_frame(b.get(), 100, Deadline::after(milliseconds(5000)), "test", f), IoError);
}

TEST(Payload, RoundTripsEveryField) {
  std::string payload =
      PayloadWriter().u8(9).u32(0xA1B2C3D4).i64(-5).str("key").strs({"a", "", "c"}).take();
  PayloadReader r(payload);
  EXPECT_EQ(r.u8(), 9);
  EXPECT_EQ(r.u32(), 0xA1B2C3D4u);
  EXPECT_EQ(r.i64(), -5);
  EXPECT_EQ(r.str(), "key");
  EXPECT_EQ(r.strs(), (std::vector<std::string>{"a", "", "c"}));
  EXPECT_NO_THROW(r.finish());
}

TEST(Payload, RefusesLengthsPastTheEndAndTrailingBytes) {
  std::string long_string = PayloadWriter().u32(1000).take() + "short";
  EXPECT_THROW(PayloadReader(long_string).str(), IoError);
  std::string many = PayloadWriter().u32(0x7FFFFFFF).take();  // would reserve 2^31 strings
  EXPECT_THROW(PayloadReader(many).strs(), IoError);
  std::string extra = PayloadWriter().u8(1).u8(2).take();
  PayloadReader r(extra);
  r.u8();
  EXPECT_THROW(r.finish(), IoError);
  EXPECT_THROW(PayloadReader("").i64(), IoError);
}

}  // namespace
}  // namespace chorus::rendezvous
