// Frames and payloads (rendezvous/frame.h): encoding, and refusal of anything malformed
// before a byte is allocated for it.
#include "rendezvous/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

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

// A connected pair of sockets: first writes, second reads.
std::pair<net::Fd, net::Fd> socket_pair() {
  net::Fd listener = net::listen_tcp("127.0.0.1", 0);
  net::Fd a = testing::raw_connect(net::local_port(listener.get()));
  return {std::move(a), net::accept_tcp(listener.get(), Deadline::after(milliseconds(5000)))};
}

TEST(Frame, BufferFollowsTheBytesThatArriveNotTheAnnouncedLength) {
  auto [a, b] = socket_pair();
  unsigned char header[kFrameHeaderBytes];
  encode_header({kFrameMagic, kFrameVersion, 1, 64u << 20}, header);
  testing::send_bytes(a.get(), std::string(reinterpret_cast<char*>(header), 12) + "abc");
  a.reset();  // a peer that announces 64 MiB, sends 3 bytes and stops
  Frame f;
  EXPECT_THROW(read_frame(b.get(), 64u << 20, Deadline::after(milliseconds(5000)), "test", f),
               IoError);
  // Allocating the announced length up front let each such peer pin 64 MiB until timeout.
  EXPECT_LE(f.payload.capacity(), size_t{2} << 20);
}

TEST(Frame, LargeFrameRoundTripsAcrossBufferSteps) {
  auto [a, b] = socket_pair();
  std::string payload((5u << 20) + 3, '\0');  // read in several growing buffer steps
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 + i / 4096);
  std::thread writer([&, fd = a.get()] {
    write_frame(fd, 9, payload, Deadline::after(milliseconds(10000)), "test");
  });
  Frame f;
  bool ok = read_frame(b.get(), 8u << 20, Deadline::after(milliseconds(10000)), "test", f);
  writer.join();
  ASSERT_TRUE(ok);
  EXPECT_EQ(f.type, 9);
  EXPECT_TRUE(f.payload == payload) << "payload of " << f.payload.size() << " bytes differs";
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

// One string more than kMaxListStrings, all empty: 4 bytes each on the wire, so a 64 MiB
// frame could otherwise make the reader build 16.7 M strings.
TEST(Payload, ListsAreCappedAtMaxListStrings) {
  std::vector<std::string> at_limit(kMaxListStrings);
  std::string payload = PayloadWriter().strs(at_limit).take();
  PayloadReader ok(payload);
  EXPECT_EQ(ok.strs().size(), kMaxListStrings);
  EXPECT_NO_THROW(ok.finish());
  at_limit.emplace_back();
  payload = PayloadWriter().strs(at_limit).take();
  try {
    PayloadReader(payload).strs();
    FAIL() << "a list of " << at_limit.size() << " strings was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("65537 strings is over the limit of 65536"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace chorus::rendezvous
