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
  std::vector<ScalarEvent> expected = {
      {"loss", 2.5f, 0, 1000.25}, {"loss", 1.25f, 1, 1001.5}, {"acc", -0.0f, -7, 0.0},
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
         "10" + "03" +                              // step 3
         "2a" + "0d" +                              // summary, 13 bytes
         "0a" + "0b" +                              //   value, 11 bytes
         "0a" + "04" + "6c6f7373" +                 //     tag "loss"
         "15" + "0000003f";                         //     simple_value 0.5f
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
  EXPECT_EQ(hex(records[1]), "2a07" "0a05" "150000803f");
  // step -1: ff x9 01. Value = 0a c8 01 <200 x 'a'> 15 00000000: 208 bytes (d0 01);
  // Summary = 0a d0 01 <208>: 211 bytes (d3 01).
  std::string expected = "10" "ffffffffffffffffff01" "2ad301" "0ad001" "0ac801" +
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
      std::string("\x0a\x01x") + std::string("\x15\x00\x00\x00\x40", 5) + std::string("\x22\x00", 2);
  std::string summary;
  for (const auto& v : {image_value, node_name_then_scalar, scalar_then_image}) {
    summary += "\x0a" + std::string(1, char(v.size())) + v;
  }
  std::string event = std::string("\x10\x05") +        // step 5
                      "\xb8\x06\x2a" +                 // unknown field 103, varint 42
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
      "\x2a\x05\x0a",                     // summary length beyond the event
      "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  // 11-byte varint
      std::string("\x09\x00\x00", 3),    // truncated fixed64
      "\x2a\x02\x0a\x09",                 // value length beyond the summary
      std::string("\x0b\x00", 2),         // wire type 3 (group)
      std::string("\x00\x01", 2),         // field number 0
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
      {"loss", 0.5f, 3, 1.5, "wall_time: 1.5 step: 3 summary { value { tag: 'loss' simple_value: 0.5 } }"},
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

}  // namespace
}  // namespace chorus
