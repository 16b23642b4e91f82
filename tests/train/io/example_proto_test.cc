// tf.train.Example: round trips, golden bytes, protoc as an independent codec, protobuf's
// merge rules, and malformed input (always InvalidArgument, never a crash).
#include "chorus/train/example_proto.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "chorus/error.h"
#include "io_test_util.h"

namespace chorus {
namespace {

using testing::hex;

bool operator==(const Feature& a, const Feature& b) {
  return a.kind == b.kind && a.bytes == b.bytes && a.floats == b.floats && a.ints == b.ints;
}

Feature bytes_feature(std::vector<std::string> v) {
  return {Feature::kBytes, std::move(v), {}, {}};
}
Feature float_feature(std::vector<float> v) { return {Feature::kFloat, {}, std::move(v), {}}; }
Feature int_feature(std::vector<int64_t> v) { return {Feature::kInt64, {}, {}, std::move(v)}; }

Features sample() {
  return {
      {"image/encoded", bytes_feature({std::string("\x89PNG\0\x01", 6), "", "second"})},
      {"label", int_feature({7})},
      {"ints", int_feature({0, -1, std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), 300})},
      {"floats", float_feature({0.5f, -0.0f, std::numeric_limits<float>::infinity(), 1e-40f})},
      {"empty_bytes", bytes_feature({})},
      {"empty_floats", float_feature({})},
      {"empty_ints", int_feature({})},
      {"", float_feature({1.0f})},
  };
}

TEST(ExampleTest, RoundTrip) {
  const Features f = sample();
  const Features back = decode_example(encode_example(f));
  ASSERT_EQ(back.size(), f.size());
  for (const auto& [key, feature] : f) {
    ASSERT_TRUE(back.count(key)) << key;
    EXPECT_TRUE(back.at(key) == feature) << key;
  }
  EXPECT_TRUE(decode_example(encode_example({})).empty());
  EXPECT_TRUE(decode_example("").empty());
}

// {"a": int64_list [1, 300]}, derived by hand:
//   Int64List  0a 03 01 ac 02        value (1, packed): 1 -> 01, 300 -> ac 02
//   Feature    1a 05 <Int64List>     int64_list is field 3: 3 << 3 | 2 = 1a
//   map entry  0a 01 61 12 07 <Feature>   key "a" (field 1), value (field 2)
//   Features   0a 0c <entry>         feature (field 1), 12 bytes
//   Example    0a 0e <Features>      features (field 1), 14 bytes
TEST(ExampleTest, GoldenBytes) {
  EXPECT_EQ(hex(encode_example({{"a", int_feature({1, 300})}})),
            "0a0e"
            "0a0c"
            "0a0161"
            "1207"
            "1a05"
            "0a03"
            "01ac02");
  // An empty float list is still present (the oneof is set): Feature = 12 00.
  EXPECT_EQ(hex(encode_example({{"b", float_feature({})}})),
            "0a09"
            "0a07"
            "0a0162"
            "1202"
            "1200");
  EXPECT_EQ(hex(encode_example({})), "0a00");
}

TEST(ExampleTest, AcceptsUnpackedLists) {
  // FloatList {value: 1.0 value: 2.0} unpacked (0d = field 1, fixed32), and a packed
  // occurrence after it, which protobuf concatenates.
  const std::string floats = std::string("\x0d\x00\x00\x80\x3f\x0d\x00\x00\x00\x40", 10) +
                             std::string("\x0a\x04\x00\x00\x40\x40", 6);  // 3.0
  const std::string ints = std::string("\x08\x05\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 13);
  auto feature_entry = [](const std::string& key, char list_key, const std::string& list) {
    std::string feature = std::string(1, list_key) + char(list.size()) + list;
    std::string entry =
        "\x0a" + std::string(1, char(key.size())) + key + "\x12" + char(feature.size()) + feature;
    return "\x0a" + std::string(1, char(entry.size())) + entry;
  };
  const std::string map = feature_entry("f", '\x12', floats) + feature_entry("i", '\x1a', ints);
  const std::string example = "\x0a" + std::string(1, char(map.size())) + map;
  const Features got = decode_example(example);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got.at("f") == float_feature({1.0f, 2.0f, 3.0f}));
  EXPECT_TRUE(got.at("i") == int_feature({5, -1}));
}

TEST(ExampleTest, ProtobufMergeRules) {
  // One Feature holding a float_list then an int64_list: the last oneof member wins.
  const std::string feature = std::string("\x12\x05\x0d\x00\x00\x80\x3f", 7) + "\x1a\x02\x08\x02";
  const std::string entry = std::string("\x0a\x01k\x12", 4) + char(feature.size()) + feature;
  std::string map = "\x0a" + std::string(1, char(entry.size())) + entry;
  // The same key again, with a bytes list: replaces the entry.
  const std::string entry2 = std::string("\x0a\x01k\x12\x05\x0a\x03\x0a\x01z", 10);
  std::string example = "\x0a" + std::string(1, char(map.size())) + map;
  EXPECT_TRUE(decode_example(example).at("k") == int_feature({2}));
  map += "\x0a" + std::string(1, char(entry2.size())) + entry2;
  example = "\x0a" + std::string(1, char(map.size())) + map;
  EXPECT_TRUE(decode_example(example).at("k") == bytes_feature({"z"}));
  // Unknown fields anywhere are skipped.
  EXPECT_TRUE(decode_example(std::string("\x10\x01\x1a\x00", 4) + example).at("k") ==
              bytes_feature({"z"}));
}

TEST(ExampleTest, EncodeRejectsValuesOutsideTheKind) {
  Feature f = int_feature({1});
  f.floats = {1.0f};
  EXPECT_THROW(encode_example({{"x", f}}), InvalidArgument);
}

TEST(ExampleTest, EveryTruncationIsInvalidArgument) {
  const std::string full = encode_example(sample());
  for (size_t n = 1; n < full.size(); ++n) {
    EXPECT_THROW(decode_example(std::string_view(full).substr(0, n)), InvalidArgument) << n;
  }
}

TEST(ExampleTest, BadPackedFloatLength) {
  // Example{features{feature{key "f" value{float_list{value: 5 bytes packed}}}}}
  const std::string bytes(
      "\x0a\x10\x0a\x0e\x0a\x01"
      "f"
      "\x12\x09\x12\x07\x0a\x05\x00\x00\x80\x3f\x00",
      18);
  try {
    decode_example(bytes);
    FAIL() << "accepted a 5-byte packed float list";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("packed float list of 5 bytes"), std::string::npos)
        << e.what();
  }
}

// Random damage must end in a decoded value or InvalidArgument, nothing else.
TEST(ExampleTest, RandomCorruptionNeverCrashes) {
  const std::string full = encode_example(sample());
  std::mt19937 rng(5);
  int rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bad = full;
    for (int k = 0, flips = 1 + rng() % 4; k < flips; ++k) {
      bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    try {
      decode_example(bad);
    } catch (const InvalidArgument&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

constexpr const char* kExampleProto = R"(syntax = "proto3";
package tensorflow;
message BytesList { repeated bytes value = 1; }
message FloatList { repeated float value = 1 [packed = true]; }
message Int64List { repeated int64 value = 1 [packed = true]; }
message Feature {
  oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; }
}
message Features { map<string, Feature> feature = 1; }
message Example { Features features = 1; }
)";

TEST(ExampleProtocTest, ProtocDecodesOurEncoding) {
  if (!testing::have_protoc()) GTEST_SKIP() << "protoc not installed (Debian protobuf-compiler)";
  testing::TempDir tmp;
  testing::write_bytes(tmp.file("example.proto"), kExampleProto);
  const Features f = {{"label", int_feature({7, -2})},
                      {"img", bytes_feature({"ab", ""})},
                      {"x", float_feature({0.5f, -1.5f})}};
  EXPECT_EQ(
      testing::run_protoc(tmp, "--decode=tensorflow.Example -I. example.proto", encode_example(f)),
      "features {\n"
      "  feature {\n    key: \"img\"\n    value {\n      bytes_list {\n"
      "        value: \"ab\"\n        value: \"\"\n      }\n    }\n  }\n"
      "  feature {\n    key: \"label\"\n    value {\n      int64_list {\n"
      "        value: 7\n        value: -2\n      }\n    }\n  }\n"
      "  feature {\n    key: \"x\"\n    value {\n      float_list {\n"
      "        value: 0.5\n        value: -1.5\n      }\n    }\n  }\n"
      "}\n");
}

TEST(ExampleProtocTest, WeDecodeProtocsEncoding) {
  if (!testing::have_protoc()) GTEST_SKIP() << "protoc not installed (Debian protobuf-compiler)";
  testing::TempDir tmp;
  testing::write_bytes(tmp.file("example.proto"), kExampleProto);
  const std::string text =
      "features { feature { key: \"a\" value { int64_list { value: [3, -4, 1099511627776] } } }"
      " feature { key: \"b\" value { float_list { value: [0.25, 1e10] } } }"
      " feature { key: \"c\" value { bytes_list { value: [\"x\", \"\\000y\"] } } } }";
  const std::string bytes =
      testing::run_protoc(tmp, "--encode=tensorflow.Example -I. example.proto", text);
  const Features got = decode_example(bytes);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got.at("a") == int_feature({3, -4, int64_t{1} << 40}));
  EXPECT_TRUE(got.at("b") == float_feature({0.25f, 1e10f}));
  EXPECT_TRUE(got.at("c") == bytes_feature({"x", std::string("\0y", 2)}));
  // One-feature examples have a single serialization: ours must be byte-identical.
  const std::string one =
      "features { feature { key: \"k\" value { float_list { value: [1, 2] } } } }";
  EXPECT_EQ(hex(encode_example({{"k", float_feature({1.0f, 2.0f})}})),
            hex(testing::run_protoc(tmp, "--encode=tensorflow.Example -I. example.proto", one)));
}

}  // namespace
}  // namespace chorus
