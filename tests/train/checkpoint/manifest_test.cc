// The MANIFEST parser on untrusted input, and the strict parsing of directory names.
#include "train/checkpoint/manifest.h"

#include <gtest/gtest.h>

#include "chorus/error.h"
#include "train/checkpoint/layout.h"

namespace chorus::ckpt {
namespace {

const std::string kHashA(64, 'a');

std::string with_checksum(const std::string& body) {
  return body + "manifest-sha256 " + sha256_hex(body) + "\n";
}

Manifest sample() {
  Manifest m;
  m.step = 1234;
  m.files = {{"model.bin", 1048576, kHashA}, {"rng", 0, sha256_hex("")}};
  return m;
}

void expect_corrupt(const std::string& text, const std::string& fragment) {
  try {
    parse_manifest(text, "/ckpt/dir");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint '/ckpt/dir'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ManifestTest, RoundTrip) {
  std::string text = encode_manifest(sample());
  EXPECT_EQ(text.substr(0, 45), "chorus-checkpoint 1\nstep 1234\nfiles 2\nfile mo");
  Manifest back = parse_manifest(text, "x");
  EXPECT_EQ(back.step, 1234);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[0].name, "model.bin");
  EXPECT_EQ(back.files[0].size, 1048576u);
  EXPECT_EQ(back.files[0].sha256_hex, kHashA);
  EXPECT_EQ(back.files[1].sha256_hex,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");  // of ""
}

TEST(ManifestTest, EveryTruncationIsRejected) {
  std::string text = encode_manifest(sample());
  for (size_t n = 0; n < text.size(); ++n) expect_corrupt(text.substr(0, n), "MANIFEST");
}

TEST(ManifestTest, EverySingleByteChangeIsRejected) {
  std::string text = encode_manifest(sample());
  for (size_t i = 0; i < text.size(); ++i) {
    std::string bad = text;
    bad[i] ^= 0x01;
    expect_corrupt(bad, "MANIFEST");
  }
}

TEST(ManifestTest, ChecksumMismatchIsNamed) {
  std::string text = encode_manifest(sample());
  text.replace(text.find("1048576"), 7, "1048577");
  expect_corrupt(text, "SHA-256 differs");
}

TEST(ManifestTest, MalformedBodiesWithValidChecksumsAreRejected) {
  const std::string head = "chorus-checkpoint 1\nstep 5\n";
  const std::string line = "file a 1 sha256 " + kHashA + "\n";
  expect_corrupt(with_checksum(head + "files 2\n" + line), "ends before the 'file' line");
  expect_corrupt(with_checksum(head + "files 0\n" + line), "unexpected text after line 3");
  expect_corrupt(with_checksum(head + "files 2\n" + line + line), "listed twice or out of order");
  expect_corrupt(with_checksum(head + "files 1\nfile ../etc 1 sha256 " + kHashA + "\n"),
                 "bad file name");
  expect_corrupt(with_checksum(head + "files 1\nfile MANIFEST 1 sha256 " + kHashA + "\n"),
                 "bad file name");
  expect_corrupt(with_checksum(head + "files 1\nfile a 01 sha256 " + kHashA + "\n"),
                 "bad file size");
  expect_corrupt(with_checksum(head + "files 1\nfile a -1 sha256 " + kHashA + "\n"),
                 "bad file size");
  expect_corrupt(
      with_checksum(head + "files 1\nfile a 99999999999999999999 sha256 " + kHashA + "\n"),
      "bad file size");
  expect_corrupt(with_checksum(head + "files 1\nfile a 1 md5 " + kHashA + "\n"), "bad checksum");
  expect_corrupt(with_checksum(head + "files 1\nfile a 1 sha256 " + std::string(64, 'A') + "\n"),
                 "bad checksum");
  expect_corrupt(with_checksum(head + "files 1\nfile  a 1 sha256 " + kHashA + "\n"),
                 "not a 'file' line");
  expect_corrupt(with_checksum(head + "files 1000000000\n"), "bad file count");
  expect_corrupt(with_checksum(head + "files 65537\n"), "bad file count");
  expect_corrupt(with_checksum("chorus-checkpoint 1\nstep -5\nfiles 0\n"), "bad step");
  expect_corrupt(with_checksum("chorus-checkpoint 1\nstep 9223372036854775808\nfiles 0\n"),
                 "bad step");
  expect_corrupt(with_checksum("chorus-checkpoint 1\nfiles 0\n"), "not a 'step' line");
  expect_corrupt(with_checksum("something else 1\nstep 1\nfiles 0\n"), "not a chorus checkpoint");
  expect_corrupt("chorus-checkpoint 1\nstep 1\nfiles 0\nmanifest-sha256 xyz\n",
                 "not 'manifest-sha256 <hex>'");
}

TEST(ManifestTest, LargestStepIsAccepted) {
  Manifest m = parse_manifest(
      with_checksum("chorus-checkpoint 1\nstep 9223372036854775807\nfiles 0\n"), "x");
  EXPECT_EQ(m.step, INT64_MAX);
}

TEST(ManifestTest, OtherVersionIsNamedAsSuch) {
  expect_corrupt(with_checksum("chorus-checkpoint 2\nstep 1\nfiles 0\n"), "");  // still rejected
  try {
    parse_manifest(with_checksum("chorus-checkpoint 2\nstep 1\nfiles 0\n"), "d");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find("format version '2' is not supported (this build reads 1)"),
        std::string::npos)
        << e.what();
  }
}

TEST(ManifestTest, OversizedIsRejectedBeforeParsing) {
  expect_corrupt(std::string(kMaxManifestBytes + 1, '\n'), "larger than");
}

TEST(ManifestTest, DecimalParsingIsCanonical) {
  EXPECT_EQ(parse_decimal("0", 10), 0u);
  EXPECT_EQ(parse_decimal("10", 10), 10u);
  EXPECT_FALSE(parse_decimal("11", 10));
  EXPECT_FALSE(parse_decimal("", 10));
  EXPECT_FALSE(parse_decimal("00", 10));
  EXPECT_FALSE(parse_decimal("+1", 10));
  EXPECT_FALSE(parse_decimal(" 1", 10));
  EXPECT_EQ(parse_decimal("18446744073709551615", UINT64_MAX), UINT64_MAX);
  EXPECT_FALSE(parse_decimal("18446744073709551616", UINT64_MAX));
}

TEST(LayoutTest, NamesParseStrictly) {
  auto kind_of = [](const std::string& prefix, const std::string& name) {
    auto parsed = parse_name(prefix, name);
    return parsed ? static_cast<int>(parsed->kind) : -1;
  };
  const std::string hex = "-42-0123456789abcdef";
  EXPECT_EQ(kind_of("ckpt", "ckpt-0"), static_cast<int>(Kind::kCommitted));
  EXPECT_EQ(parse_name("ckpt", "ckpt-100")->step, 100);
  EXPECT_EQ(kind_of("ckpt", "ckpt-007"), -1);
  EXPECT_EQ(kind_of("ckpt", "ckpt-"), -1);
  EXPECT_EQ(kind_of("ckpt", "ckpt-1x"), -1);
  EXPECT_EQ(kind_of("ckpt", "ckpt-tmp-5"), -1);  // committed step 5 of prefix "ckpt-tmp"
  EXPECT_EQ(kind_of("ckpt", "ckpt-99999999999999999999"), -1);
  EXPECT_EQ(kind_of("ckpt", ".ckpt-tmp-5" + hex), static_cast<int>(Kind::kTemp));
  EXPECT_EQ(parse_name("ckpt", ".ckpt-tmp-5" + hex)->step, 5);
  EXPECT_EQ(kind_of("ckpt", ".ckpt-old-5" + hex), static_cast<int>(Kind::kOld));
  EXPECT_EQ(kind_of("ckpt", ".ckpt-del" + hex), static_cast<int>(Kind::kDeleting));
  EXPECT_EQ(kind_of("ckpt", ".ckpt-tmp-tmp-5" + hex), -1);  // prefix "ckpt-tmp"'s
  EXPECT_EQ(kind_of("ckpt-tmp", ".ckpt-tmp-tmp-5" + hex), static_cast<int>(Kind::kTemp));
  EXPECT_EQ(kind_of("ckpt", ".ckpt-tmp-5-42-0123"), -1);
  EXPECT_EQ(kind_of("ckpt", ".ckpt-tmp-5-42-0123456789ABCDEF"), -1);
  EXPECT_EQ(kind_of("ckpt", ".ckpt-tmp-5" + hex + "0"), -1);
  EXPECT_EQ(kind_of("ckpt", ".ckpt-gone-5" + hex), -1);
  // Fresh names parse back as what they are.
  EXPECT_EQ(kind_of("ckpt", temp_name("ckpt", 12)), static_cast<int>(Kind::kTemp));
  EXPECT_EQ(kind_of("ckpt", old_name("ckpt", 12)), static_cast<int>(Kind::kOld));
  EXPECT_EQ(kind_of("ckpt", deleting_name("ckpt")), static_cast<int>(Kind::kDeleting));
  EXPECT_NE(temp_name("ckpt", 1), temp_name("ckpt", 1));
}

}  // namespace
}  // namespace chorus::ckpt
