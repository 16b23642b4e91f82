// IDX: Debian's Fashion-MNIST files, small hand-made files (plain and gzip), and bad
// headers, truncation and corrupt compression.
#include "chorus/train/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>

#include "chorus/error.h"
#include "io_test_util.h"

namespace chorus {
namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::string idx_bytes(uint8_t type, std::vector<uint32_t> dims, const std::string& data) {
  std::string out = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(d >> shift));
  }
  return out + data;
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

template <typename Fn>
void expect_invalid(Fn fn, const std::string& path, const std::string& why) {
  try {
    fn();
    ADD_FAILURE() << "accepted " << path;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(IdxTest, FashionMnistTestLabels) {
  const std::string path = kFashion + "/t10k-labels-idx1-ubyte.gz";
  if (access(path.c_str(), R_OK) != 0) GTEST_SKIP() << path << " missing (dataset-fashion-mnist)";
  const IdxArray a = read_idx(kFashion + "/t10k-labels-idx1-ubyte");  // ".gz" found
  ASSERT_EQ(a.shape, std::vector<int64_t>{10000});
  ASSERT_EQ(a.data.size(), 10000u);
  std::array<int, 10> count{};
  for (uint8_t label : a.data) {
    ASSERT_LT(label, 10);
    ++count[label];
  }
  for (int c : count) EXPECT_EQ(c, 1000);  // the test set is balanced
  EXPECT_EQ(read_idx(path).data, a.data);
}

TEST(IdxTest, FashionMnistTestImages) {
  const std::string path = kFashion + "/t10k-images-idx3-ubyte.gz";
  if (access(path.c_str(), R_OK) != 0) GTEST_SKIP() << path << " missing (dataset-fashion-mnist)";
  const IdxArray a = read_idx(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{10000, 28, 28}));
  EXPECT_EQ(a.data.size(), 10000u * 28 * 28);
}

TEST(IdxTest, SmallPlainAndGzipFiles) {
  testing::TempDir tmp;
  const std::string data = "\x01\x02\x03\x04\x05\x06";
  const std::string bytes = idx_bytes(0x08, {2, 3}, data);
  testing::write_bytes(tmp.file("plain"), bytes);
  write_gzip(tmp.file("zipped.gz"), bytes);
  for (const std::string name : {"plain", "zipped", "zipped.gz"}) {
    const IdxArray a = read_idx(tmp.file(name));
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3})) << name;
    EXPECT_EQ(std::string(a.data.begin(), a.data.end()), data) << name;
  }
  testing::write_bytes(tmp.file("empty"), idx_bytes(0x08, {0, 5}, ""));
  EXPECT_TRUE(read_idx(tmp.file("empty")).data.empty());
}

TEST(IdxTest, BadHeaders) {
  testing::TempDir tmp;
  const std::string path = tmp.file("bad");
  auto read = [&] { read_idx(path); };
  testing::write_bytes(path, idx_bytes(0x0d, {2}, "12345678"));  // float data
  expect_invalid(read, path, "not an IDX file of unsigned bytes");
  testing::write_bytes(path, "PK\x03\x04 not idx at all");
  expect_invalid(read, path, "not an IDX file of unsigned bytes");
  testing::write_bytes(path, idx_bytes(0x08, {}, ""));  // zero dimensions
  expect_invalid(read, path, "not an IDX file of unsigned bytes");
  testing::write_bytes(path, idx_bytes(0x08, {0xffffffff, 0xffffffff}, ""));
  expect_invalid(read, path, "implausible size");
  testing::write_bytes(path, std::string("\0\0", 2));
  expect_invalid(read, path, "truncated");
}

TEST(IdxTest, TruncatedData) {
  testing::TempDir tmp;
  const std::string path = tmp.file("short");
  testing::write_bytes(path, idx_bytes(0x08, {10, 10}, "only 20 bytes here..."));
  expect_invalid([&] { read_idx(path); }, path, "truncated");
  // 1 GiB claimed, 10 bytes present: fails without holding the claimed size.
  write_gzip(path + "2.gz", idx_bytes(0x08, {1u << 30}, "0123456789"));
  expect_invalid([&] { read_idx(path + "2"); }, path + "2.gz", "truncated");
}

TEST(IdxTest, CorruptGzipIsInvalidArgument) {
  testing::TempDir tmp;
  const std::string path = tmp.file("broken.gz");
  // A gzip header, then a deflate block of the reserved type 3 (first byte 0x07).
  testing::write_bytes(path, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x07junk", 15));
  expect_invalid([&] { read_idx(path); }, path, "corrupt");
}

TEST(IdxTest, MissingFileIsIoError) {
  testing::TempDir tmp;
  EXPECT_THROW(read_idx(tmp.file("missing")), IoError);
}

}  // namespace
}  // namespace chorus
