// TensorBoard event files: round trip, file naming, golden bytes derived by hand and
// checked against protoc (an independent protobuf implementation), hostile input.
#include "chorus/train/tfevents.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "chorus/error.h"
#include "io_test_util.h"

namespace chorus {
namespace {

using testing::hex;

double now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> records_of(const EventWriter& w) { return read_tfrecord_file(w.path()); }

bool operator==(const ScalarEvent& a, const ScalarEvent& b) {
  return a.tag == b.tag && a.value == b.value && a.step == b.step && a.wall_time == b.wall_time;
}

TEST(EventWriterTest, ScalarsRoundTrip) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("logs/run 1/train");  // parents created
  const double before = now();
  std::vector<ScalarEvent> expected = {{"loss", 2.5f, 0, 1000.25},
                                       {"loss", 1.25f, 1, 1001.5},
                                       {"acc", -0.0f, -7, 0.0},
                                       {"", 3e38f, int64_t{1} << 40, 1.7e9}};
  std::string path;
  {
    EventWriter w(dir);
    path = w.path();
    for (const auto& e : expected) w.add_scalar(e.tag, e.value, e.step, e.wall_time);
    w.add_scalar("now", 7.0f, 9);
  }
  const double after = now();
  auto got = read_scalars(path);
  ASSERT_EQ(got.size(), expected.size() + 1);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(got[i] == expected[i]) << i;
  EXPECT_EQ(got.back().tag, "now");
  EXPECT_EQ(got.back().step, 9);
  EXPECT_GE(got.back().wall_time, before - 1);
  EXPECT_LE(got.back().wall_time, after + 1);
  EXPECT_EQ(read_file_version(path), "brain.Event:2");
}

TEST(EventWriterTest, FileNameAndLocation) {
  testing::TempDir tmp;
  EventWriter w(tmp.path());
  const std::string name = std::filesystem::path(w.path()).filename().string();
  EXPECT_EQ(std::filesystem::path(w.path()).parent_path().string(), tmp.path());
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  EXPECT_NE(name.find(std::string(".") + host + "." + std::to_string(::getpid())),
            std::string::npos)
      << name;
  EventWriter second(tmp.path());
  EXPECT_NE(second.path(), w.path());
}

TEST(EventWriterTest, FirstRecordIsFileVersion) {
  testing::TempDir tmp;
  const double before = now();
  EventWriter w(tmp.path());  // flushed at once: visible before any scalar
  auto records = records_of(w);
  ASSERT_EQ(records.size(), 1u);
  const std::string& r = records[0];
  // 09 <wall_time, 8 bytes> 1a 0d "brain.Event:2": fields 1 (fixed64) and 3 (13 bytes).
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(r[0], '\x09');
  EXPECT_EQ(r.substr(9), std::string("\x1a\x0d") + "brain.Event:2");
  double wall;
  std::memcpy(&wall, r.data() + 1, 8);  // little-endian host
  EXPECT_GE(wall, before - 1);
  EXPECT_LE(wall, now() + 1);
}

// Event{wall_time: 1.5, step: 3, summary {value {tag: "loss" simple_value: 0.5}}}:
//   Summary.Value: 0a = field 1 (tag) << 3 | 2 (length-delimited), 04, "loss" 6c 6f 73 73;
//                  15 = field 2 (simple_value) << 3 | 5 (fixed32), 0.5f = 0x3f000000 LE
//                  -> 00 00 00 3f; 11 bytes in all.
//   Summary:       0a = field 1 (value) << 3 | 2, 0b (11), the Value; 13 bytes.
//   Event:         09 = field 1 (wall_time) << 3 | 1 (fixed64), 1.5 = 0x3ff8000000000000
//                  LE -> 00 00 00 00 00 00 f8 3f; 10 = field 2 (step) << 3 | 0 (varint),
//                  03; 2a = field 5 (summary) << 3 | 2, 0d (13), the Summary.
std::string golden_scalar_hex() {
  return std::string("09") + "000000000000f83f" +  // wall_time 1.5
         "10" + "03" +                             // step 3
         "2a" + "0d" +                             // summary, 13 bytes
         "0a" + "0b" +                             //   value, 11 bytes
         "0a" + "04" + "6c6f7373" +                //     tag "loss"
         "15" + "0000003f";                        //     simple_value 0.5f
}

// The records of a file holding one scalar: "loss" = 0.5 at step 3, wall time 1.5.
std::vector<std::string> one_scalar_records(const testing::TempDir& tmp) {
  EventWriter w(tmp.path());
  w.add_scalar("loss", 0.5f, 3, 1.5);
  w.flush();
  return records_of(w);
}

TEST(EventWriterTest, GoldenScalarBytes) {
  testing::TempDir tmp;
  auto records = one_scalar_records(tmp);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(hex(records[1]), golden_scalar_hex());
}

// proto3 omits zero step and wall_time and an empty tag; a negative step is a 10-byte
// varint; a 200-byte tag needs a 2-byte length (200 = 0xc8 -> c8 01).
TEST(EventWriterTest, GoldenDefaultsAndLongVarints) {
  testing::TempDir tmp;
  EventWriter w(tmp.path());
  w.add_scalar("", 1.0f, 0, 0.0);
  w.add_scalar(std::string(200, 'a'), 0.0f, -1, 0.0);
  w.flush();
  auto records = records_of(w);
  ASSERT_EQ(records.size(), 3u);
  // summary(5) 07 { value(1) 05 { simple_value(2) 1.0f = 0x3f800000 } }
  EXPECT_EQ(hex(records[1]),
            "2a07"
            "0a05"
            "150000803f");
  // step -1: ff x9 01. Value = 0a c8 01 <200 x 'a'> 15 00000000: 208 bytes (d0 01);
  // Summary = 0a d0 01 <208>: 211 bytes (d3 01).
  std::string expected =
      "10"
      "ffffffffffffffffff01"
      "2ad301"
      "0ad001"
      "0ac801" +
      hex(std::string(200, 'a')) + "1500000000";
  EXPECT_EQ(hex(records[2]), expected);
}

TEST(EventWriterTest, ConcurrentWriters) {
  testing::TempDir tmp;
  std::string path;
  {
    EventWriter w(tmp.path());
    path = w.path();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&w, t] {
        for (int i = 0; i < 500; ++i) w.add_scalar("t" + std::to_string(t), 1.0f * i, i, 1.0);
      });
    }
    for (auto& th : threads) th.join();
  }
  std::set<std::pair<std::string, int64_t>> seen;
  for (const auto& e : read_scalars(path)) seen.emplace(e.tag, e.step);
  EXPECT_EQ(seen.size(), 2000u);
}

TEST(EventWriterTest, UncreatableDirectoryIsIoError) {
  testing::TempDir tmp;
  testing::write_bytes(tmp.file("file"), "x");
  EXPECT_THROW(EventWriter(tmp.file("file/sub")), IoError);
}

// ---- reading hostile or foreign files ----

// Writes raw event protos as a TFRecord file.
std::string write_events(const testing::TempDir& tmp, const std::vector<std::string>& events) {
  const std::string path = tmp.file("events.out.tfevents.1.test");
  TFRecordWriter w(path);
  for (const auto& e : events) w.write(e);
  return path;
}

TEST(ReadScalarsTest, SkipsUnknownFieldsAndOtherValueKinds) {
  testing::TempDir tmp;
  const std::string image_value = std::string("\x0a\x03img") + "\x22\x02\x08\x01";  // image=4
  const std::string node_name_then_scalar =  // node_name (7) is outside the oneof
      std::string("\x3a\x01n") + "\x0a\x01s" + std::string("\x15\x00\x00\x80\x3f", 5);
  const std::string scalar_then_image =  // a later oneof member replaces simple_value
      std::string("\x0a\x01x") + std::string("\x15\x00\x00\x00\x40", 5) +
      std::string("\x22\x00", 2);
  std::string summary;
  for (const auto& v : {image_value, node_name_then_scalar, scalar_then_image}) {
    summary += "\x0a" + std::string(1, char(v.size())) + v;
  }
  std::string event = std::string("\x10\x05") +             // step 5
                      "\xb8\x06\x2a" +                      // unknown field 103, varint 42
                      std::string("\x52\x02\x0a\x00", 4) +  // source_metadata (10)
                      "\x2a" + char(summary.size()) + summary;
  auto got = read_scalars(write_events(tmp, {event}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tag, "s");
  EXPECT_EQ(got[0].value, 1.0f);
  EXPECT_EQ(got[0].step, 5);
  EXPECT_EQ(got[0].wall_time, 0.0);
}

TEST(ReadScalarsTest, MalformedEventNamesFileAndOffset) {
  testing::TempDir tmp;
  const std::string good = "\x10\x01";
  const std::vector<std::string> bad = {
      "\x2a\x05\x0a",                                      // summary length beyond the event
      "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  // 11-byte varint
      std::string("\x09\x00\x00", 3),                      // truncated fixed64
      "\x2a\x02\x0a\x09",                                  // value length beyond the summary
      std::string("\x0b\x00", 2),                          // wire type 3 (group)
      std::string("\x00\x01", 2),                          // field number 0
  };
  for (const auto& b : bad) {
    const std::string path = write_events(tmp, {good, b});
    try {
      read_scalars(path);
      ADD_FAILURE() << "accepted " << hex(b);
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("record at byte offset 18"), std::string::npos) << msg;
      EXPECT_NE(msg.find("malformed protobuf"), std::string::npos) << msg;
    }
  }
}

TEST(ReadScalarsTest, EmptyOrMissingFile) {
  testing::TempDir tmp;
  const std::string path = write_events(tmp, {});
  EXPECT_TRUE(read_scalars(path).empty());
  EXPECT_THROW(read_file_version(path), InvalidArgument);
  EXPECT_THROW(read_scalars(tmp.file("missing")), IoError);
  EXPECT_EQ(read_file_version(write_events(tmp, {"\x10\x01"})), "");
}

// ---- TF2 scalars: Value{tensor = 8} with the "scalars" plugin ----
// Field numbers from tensorflow's summary.proto (Value: tag 1, tensor 8, metadata 9;
// SummaryMetadata: plugin_data 1; PluginData: plugin_name 1), tensor.proto (TensorProto:
// dtype 1, tensor_shape 2, tensor_content 4, float_val 5, double_val 6) and types.proto
// (DT_FLOAT 1, DT_DOUBLE 2, DT_INT32 3). Built here byte by byte, without chorus's writer.

std::string varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
  return out;
}
std::string key(uint32_t field, uint32_t wire_type) { return varint(field << 3 | wire_type); }
std::string len_field(uint32_t field, const std::string& bytes) {
  return key(field, 2) + varint(bytes.size()) + bytes;
}
std::string varint_field(uint32_t field, uint64_t v) { return key(field, 0) + varint(v); }
std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}
std::string f32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return le(b, 4);
}
std::string f64(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return le(b, 8);
}

const std::string kScalarsMetadata = len_field(1, len_field(1, "scalars") + len_field(2, ""));
const std::string kScalarShape = len_field(2, "");  // TensorShapeProto with no dims

// An Event{wall_time, step, summary{value{tag, [metadata], tensor}}}.
std::string tensor_event(const std::string& tag, const std::string& tensor, int64_t step,
                         const std::string& metadata = kScalarsMetadata) {
  std::string value = len_field(1, tag) + len_field(8, tensor);
  if (!metadata.empty()) value += len_field(9, metadata);
  return key(1, 1) + f64(100.5) + varint_field(2, static_cast<uint64_t>(step)) +
         len_field(5, len_field(1, value));
}

TEST(ReadScalarsTest, Tf2ScalarsPluginTensors) {
  testing::TempDir tmp;
  const std::string float_packed = varint_field(1, 1) + kScalarShape + len_field(5, f32(0.25f));
  const std::string float_unpacked = varint_field(1, 1) + kScalarShape + key(5, 5) + f32(-3.5f);
  const std::string double_packed = varint_field(1, 2) + kScalarShape + len_field(6, f64(0.125));
  const std::string double_unpacked = varint_field(1, 2) + key(6, 1) + f64(1e300);
  const std::string float_content = varint_field(1, 1) + kScalarShape + len_field(4, f32(7.0f));
  const std::string double_content = varint_field(1, 2) + len_field(4, f64(-2.0));
  auto got = read_scalars(write_events(tmp, {
                                                tensor_event("epoch_loss", float_packed, 1),
                                                tensor_event("epoch_loss", float_unpacked, 2),
                                                tensor_event("lr", double_packed, 3),
                                                tensor_event("big", double_unpacked, 4),
                                                tensor_event("content/f", float_content, 5),
                                                tensor_event("content/d", double_content, 6),
                                            }));
  ASSERT_EQ(got.size(), 6u);
  const std::vector<std::pair<std::string, float>> want = {
      {"epoch_loss", 0.25f}, {"epoch_loss", -3.5f},
      {"lr", 0.125f},        {"big", static_cast<float>(1e300)},
      {"content/f", 7.0f},   {"content/d", -2.0f}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tag, want[i].first) << i;
    EXPECT_EQ(got[i].value, want[i].second) << i;
    EXPECT_EQ(got[i].step, static_cast<int64_t>(i + 1)) << i;
    EXPECT_EQ(got[i].wall_time, 100.5) << i;
  }
}

// TensorFlow may write a tag's metadata with its first value only.
TEST(ReadScalarsTest, Tf2MetadataOnlyOnTheFirstValueOfATag) {
  testing::TempDir tmp;
  auto tensor = [](float v) { return varint_field(1, 1) + len_field(5, f32(v)); };
  auto got = read_scalars(write_events(
      tmp,
      {
          tensor_event("unknown", tensor(9.0f), 0, ""),  // no metadata, tag never seen: skipped
          tensor_event("loss", tensor(1.0f), 1),
          tensor_event("loss", tensor(0.5f), 2, ""),
          tensor_event("loss", tensor(0.25f), 3, ""),
      }));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].value, 1.0f);
  EXPECT_EQ(got[1].value, 0.5f);
  EXPECT_EQ(got[2].value, 0.25f);
  EXPECT_EQ(got[2].step, 3);
}

TEST(ReadScalarsTest, Tf2TensorsThatAreNoScalarsAreSkipped) {
  testing::TempDir tmp;
  const std::string one = varint_field(1, 1) + len_field(5, f32(1.0f));
  const std::string histogram_metadata = len_field(1, len_field(1, "histograms"));
  std::vector<std::string> events = {
      tensor_event("other_plugin", one, 1, histogram_metadata),
      tensor_event("int32", varint_field(1, 3) + len_field(7, varint(5)), 2),
      tensor_event("two", varint_field(1, 1) + len_field(5, f32(1.0f) + f32(2.0f)), 3),
      tensor_event("no_dtype", len_field(5, f32(1.0f)), 4),
      tensor_event("content_size", varint_field(1, 1) + len_field(4, f64(1.0)), 5),
      tensor_event("empty", varint_field(1, 1), 6),
  };
  // A tensor replaced by a later simple_value is a simple_value (the oneof's last wins).
  const std::string replaced = len_field(1, "replaced") + len_field(8, one) +
                               len_field(9, kScalarsMetadata) + key(2, 5) + f32(4.0f);
  events.push_back(len_field(5, len_field(1, replaced)));
  auto got = read_scalars(write_events(tmp, events));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tag, "replaced");
  EXPECT_EQ(got[0].value, 4.0f);
  // A malformed tensor is an error naming the record, as any malformed event.
  const std::string path =
      write_events(tmp, {tensor_event("bad", varint_field(1, 1) + len_field(5, "\x01\x02"), 1)});
  EXPECT_THROW(read_scalars(path), InvalidArgument);
}

// ---- protoc as an independent decoder and encoder ----

constexpr const char* kEventProto = R"(syntax = "proto3";
package tensorflow;
message Value { string tag = 1; oneof value { float simple_value = 2; } }
message Summary { repeated Value value = 1; }
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what { string file_version = 3; Summary summary = 5; }
}
)";

TEST(EventProtocTest, DecodeRawSeesTheFieldNumbersAndValues) {
  if (!testing::have_protoc()) GTEST_SKIP() << "protoc not installed (Debian protobuf-compiler)";
  testing::TempDir tmp;
  auto records = one_scalar_records(tmp);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(testing::run_protoc(tmp, "--decode_raw", records[1]),
            "1: 0x3ff8000000000000\n"  // wall_time 1.5 as fixed64
            "2: 3\n"                   // step
            "5 {\n"                    // summary
            "  1 {\n"                  //   value
            "    1: \"loss\"\n"        //     tag
            "    2: 0x3f000000\n"      //     simple_value 0.5f as fixed32
            "  }\n"
            "}\n");
  const std::string version = testing::run_protoc(tmp, "--decode_raw", records[0]);
  EXPECT_NE(version.find("3: \"brain.Event:2\"\n"), std::string::npos) << version;
  EXPECT_EQ(version.rfind("1: 0x", 0), 0u) << version;
}

TEST(EventProtocTest, BytesEqualProtocEncoding) {
  if (!testing::have_protoc()) GTEST_SKIP() << "protoc not installed (Debian protobuf-compiler)";
  testing::TempDir tmp;
  testing::write_bytes(tmp.file("event.proto"), kEventProto);
  struct Case {
    std::string tag;
    float value;
    int64_t step;
    double wall_time;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"loss", 0.5f, 3, 1.5,
       "wall_time: 1.5 step: 3 summary { value { tag: 'loss' simple_value: 0.5 } }"},
      {"a/b", -2.25f, -5, 1700000000.125,
       "wall_time: 1700000000.125 step: -5 summary { value { tag: 'a/b' simple_value: -2.25 } }"},
      {"", 0.0f, 0, 0.0, "summary { value { simple_value: 0 } }"},
  };
  EventWriter w(tmp.file("logs"));
  for (const auto& c : cases) w.add_scalar(c.tag, c.value, c.step, c.wall_time);
  w.flush();
  auto records = records_of(w);
  ASSERT_EQ(records.size(), cases.size() + 1);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string text = cases[i].text;
    for (auto& ch : text) ch = ch == '\'' ? '"' : ch;
    EXPECT_EQ(hex(records[i + 1]),
              hex(testing::run_protoc(tmp, "--encode=tensorflow.Event -I. event.proto", text)))
        << text;
  }
}

// The TF2 schema written from the field numbers above; protoc encodes the events, which
// read_scalars must read (an encoder independent of the hand-built bytes).
constexpr const char* kTf2Proto = R"(syntax = "proto3";
package tf2;
message PluginData { string plugin_name = 1; bytes content = 2; }
message SummaryMetadata { PluginData plugin_data = 1; string display_name = 2; }
message Dim { int64 size = 1; }
message TensorShape { repeated Dim dim = 2; }
message Tensor {
  int32 dtype = 1;
  TensorShape tensor_shape = 2;
  bytes tensor_content = 4;
  repeated float float_val = 5;
  repeated double double_val = 6;
}
message Value {
  string tag = 1;
  SummaryMetadata metadata = 9;
  oneof value { float simple_value = 2; Tensor tensor = 8; }
}
message Summary { repeated Value value = 1; }
message Event { double wall_time = 1; int64 step = 2; Summary summary = 5; }
)";

TEST(EventProtocTest, Tf2ScalarsEncodedByProtoc) {
  if (!testing::have_protoc()) GTEST_SKIP() << "protoc not installed (Debian protobuf-compiler)";
  testing::TempDir tmp;
  testing::write_bytes(tmp.file("tf2.proto"), kTf2Proto);
  const std::string meta = "metadata { plugin_data { plugin_name: 'scalars' } } ";
  const std::vector<std::string> texts = {
      "wall_time: 2.5 step: 1 summary { value { tag: 'loss' " + meta +
          "tensor { dtype: 1 tensor_shape {} float_val: 0.75 } } }",
      "wall_time: 3.5 step: 2 summary { value { tag: 'loss' tensor { dtype: 1 float_val: 0.5 } } }",
      "step: 3 summary { value { tag: 'lr' " + meta + "tensor { dtype: 2 double_val: 0.001 } } }",
      "step: 4 summary { value { tag: 'h' metadata { plugin_data { plugin_name: 'histograms' } } "
      "tensor { dtype: 1 float_val: 1 } } }",
  };
  std::vector<std::string> events;
  for (std::string text : texts) {
    for (auto& ch : text) ch = ch == '\'' ? '"' : ch;
    events.push_back(testing::run_protoc(tmp, "--encode=tf2.Event -I. tf2.proto", text));
  }
  auto got = read_scalars(write_events(tmp, events));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].tag, "loss");
  EXPECT_EQ(got[0].value, 0.75f);
  EXPECT_EQ(got[0].wall_time, 2.5);
  EXPECT_EQ(got[1].value, 0.5f);
  EXPECT_EQ(got[1].step, 2);
  EXPECT_EQ(got[2].tag, "lr");
  EXPECT_EQ(got[2].value, static_cast<float>(0.001));
}

}  // namespace
}  // namespace chorus
