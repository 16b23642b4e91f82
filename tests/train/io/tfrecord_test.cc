// TFRecord: golden framing, round trips, append, and every kind of corruption reported
// as InvalidArgument with the file name and the bad record's byte offset.
#include "chorus/train/tfrecord.h"

#include <gtest/gtest.h>

#include <random>

#include "chorus/error.h"
#include "io_test_util.h"
#include "util/crc32c.h"

namespace chorus {
namespace {

using testing::hex;
using testing::read_bytes;
using testing::write_bytes;

std::string random_string(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Expected bytes from a bitwise CRC-32C written independently (Python). The empty
// record's data CRC is crc32c("") = 0, masked: rotate(0) + 0xa282ead8 = d8 ea 82 a2 (LE).
TEST(TFRecordTest, GoldenFraming) {
  EXPECT_EQ(hex(frame_tfrecord("")),
            "0000000000000000"
            "29039807"
            ""
            "d8ea82a2");
  EXPECT_EQ(hex(frame_tfrecord("hello")),
            "0500000000000000"
            "eab2043e"
            "68656c6c6f"
            "bb1f1c19");
}

TEST(TFRecordTest, WriterBytesAreTheFraming) {
  testing::TempDir tmp;
  const std::string path = tmp.file("a.tfrecord");
  {
    TFRecordWriter w(path);
    w.write("hello");
    w.write("");
  }
  EXPECT_EQ(read_bytes(path), frame_tfrecord("hello") + frame_tfrecord(""));
}

TEST(TFRecordTest, RoundTrip) {
  testing::TempDir tmp;
  const std::string path = tmp.file("r.tfrecord");
  std::vector<std::string> records = {"", "x", random_string(3 << 20, 1), ""};
  for (int i = 0; i < 1000; ++i) records.push_back(random_string(i % 97, 100 + i));
  {
    TFRecordWriter w(path);
    for (const auto& r : records) w.write(r);
    w.fsync();
  }
  EXPECT_EQ(read_tfrecord_file(path), records);

  TFRecordReader reader(path);
  std::string got;
  uint64_t offset = 0;
  for (const auto& r : records) {
    ASSERT_TRUE(reader.read(got));
    offset += 16 + r.size();
    EXPECT_EQ(reader.offset(), offset);
  }
  EXPECT_FALSE(reader.read(got));
  EXPECT_FALSE(reader.read(got));  // the end stays the end
}

TEST(TFRecordTest, EmptyFileHasNoRecords) {
  testing::TempDir tmp;
  TFRecordWriter(tmp.file("e")).close();
  EXPECT_TRUE(read_tfrecord_file(tmp.file("e")).empty());
}

TEST(TFRecordTest, AppendKeepsAndTruncateDrops) {
  testing::TempDir tmp;
  const std::string path = tmp.file("a");
  TFRecordWriter(path).write("one");
  {
    TFRecordWriter w(path, /*append=*/true);
    w.write("two");
    w.write("three");
  }
  EXPECT_EQ(read_tfrecord_file(path), (std::vector<std::string>{"one", "two", "three"}));
  TFRecordWriter(path).write("four");
  EXPECT_EQ(read_tfrecord_file(path), std::vector<std::string>{"four"});
}

TEST(TFRecordTest, ReaderFollowsAGrowingFile) {
  testing::TempDir tmp;
  const std::string path = tmp.file("g");
  TFRecordWriter w(path);
  w.write("first");
  w.flush();
  TFRecordReader reader(path);
  std::string got;
  ASSERT_TRUE(reader.read(got));
  EXPECT_FALSE(reader.read(got));
  w.write("second");
  w.flush();
  ASSERT_TRUE(reader.read(got));
  EXPECT_EQ(got, "second");
}

TEST(TFRecordTest, HalfWrittenRecordFailsThenReadsOnceComplete) {
  testing::TempDir tmp;
  const std::string path = tmp.file("h");
  const std::string frame = frame_tfrecord("payload");
  write_bytes(path, frame.substr(0, 15));
  TFRecordReader reader(path);
  std::string got;
  EXPECT_THROW(reader.read(got), InvalidArgument);
  EXPECT_EQ(reader.offset(), 0u);
  write_bytes(path, frame);
  ASSERT_TRUE(reader.read(got));
  EXPECT_EQ(got, "payload");
}

TEST(TFRecordTest, OpenAndUseErrors) {
  testing::TempDir tmp;
  EXPECT_THROW(TFRecordReader(tmp.file("missing")), IoError);
  EXPECT_THROW(TFRecordWriter(tmp.file("no/such/dir/f")), IoError);
  TFRecordWriter w(tmp.file("c"));
  w.close();
  w.close();  // idempotent
  EXPECT_THROW(w.write("x"), InvalidArgument);
  EXPECT_THROW(w.flush(), InvalidArgument);
}

// ---- corruption: the second of three records is damaged ----

class TFRecordCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_.file("corrupt.tfrecord");
    good_ = frame_tfrecord("first") + frame_tfrecord("second record") + frame_tfrecord("third");
  }

  // Writes `bytes`, checks that the first record reads and the second throws
  // InvalidArgument naming the file, offset 21 and `why`; the error repeats on retry.
  void expect_bad_second(const std::string& bytes, const std::string& why) {
    write_bytes(path_, bytes);
    TFRecordReader reader(path_);
    std::string got;
    ASSERT_TRUE(reader.read(got));
    EXPECT_EQ(got, "first");
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        reader.read(got);
        ADD_FAILURE() << "corruption not detected: " << why;
      } catch (const InvalidArgument& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path_), std::string::npos) << msg;
        EXPECT_NE(msg.find("byte offset 21 "), std::string::npos) << msg;
        EXPECT_NE(msg.find(why), std::string::npos) << msg;
      }
      EXPECT_EQ(reader.offset(), kSecond);
      EXPECT_LT(got.capacity(), size_t{1} << 20) << "allocated for a corrupt length";
    }
    EXPECT_THROW(read_tfrecord_file(path_), InvalidArgument);
  }

  std::string flipped(size_t at) const {
    std::string b = good_;
    b[at] = static_cast<char>(b[at] ^ 0x40);
    return b;
  }

  static constexpr uint64_t kSecond = 16 + 5;  // "first" framed
  static constexpr uint64_t kSecondData = kSecond + 12;
  static constexpr uint64_t kSecondFooter = kSecondData + 13;
  testing::TempDir tmp_;
  std::string path_;
  std::string good_;
};

TEST_F(TFRecordCorruptionTest, IntactFileReads) {
  write_bytes(path_, good_);
  EXPECT_EQ(read_tfrecord_file(path_).size(), 3u);
}

TEST_F(TFRecordCorruptionTest, FlippedLengthByte) {
  expect_bad_second(flipped(kSecond + 1), "length checksum mismatch");
}

TEST_F(TFRecordCorruptionTest, FlippedLengthChecksum) {
  expect_bad_second(flipped(kSecond + 9), "length checksum mismatch");
}

TEST_F(TFRecordCorruptionTest, FlippedDataByte) {
  expect_bad_second(flipped(kSecondData + 4), "data checksum mismatch");
}

TEST_F(TFRecordCorruptionTest, FlippedDataChecksum) {
  expect_bad_second(flipped(kSecondFooter + 3), "data checksum mismatch");
}

TEST_F(TFRecordCorruptionTest, TruncatedInHeader) {
  expect_bad_second(good_.substr(0, kSecond + 7), "truncated header (7 of 12 bytes)");
}

TEST_F(TFRecordCorruptionTest, TruncatedInData) {
  expect_bad_second(good_.substr(0, kSecondData + 5), "exceeds the 17 bytes left");
}

TEST_F(TFRecordCorruptionTest, TruncatedInDataChecksum) {
  expect_bad_second(good_.substr(0, kSecondFooter + 2), "exceeds");
}

// A header claiming `length` bytes, with the correct length checksum.
std::string header_claiming(uint64_t length) {
  std::string h(8, '\0');
  for (int i = 0; i < 8; ++i) h[i] = static_cast<char>(length >> (8 * i));
  uint32_t masked = crc32c_mask(crc32c(h.data(), 8));
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<char>(masked >> (8 * i)));
  return h;
}

// Huge lengths with their correct checksum must fail on the size check, before any
// allocation (resize() would throw length_error or bad_alloc, not InvalidArgument).
TEST_F(TFRecordCorruptionTest, HugeLengthWithValidChecksum) {
  const std::string tail = "data much shorter than the claimed length";
  expect_bad_second(frame_tfrecord("first") + header_claiming(~uint64_t{0}) + tail,
                    "length 18446744073709551615 exceeds the 53 bytes left");
  expect_bad_second(frame_tfrecord("first") + header_claiming(uint64_t{1} << 40) + tail,
                    "length 1099511627776 exceeds");
}

TEST_F(TFRecordCorruptionTest, HugeLengthWithWrongChecksum) {
  std::string bytes = frame_tfrecord("first") + std::string(12, '\xff') + "data";
  expect_bad_second(bytes, "length checksum mismatch");
}

}  // namespace
}  // namespace chorus
