// chorus-board's model over chorus's own event files and a TensorFlow 2-style one.
#include "scalar_board.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "chorus/train/tfrecord.h"

namespace chorus::web {
namespace {

struct TempDir {
  TempDir() {
    char buf[] = "/tmp/chorus_board_test.XXXXXX";
    path = ::mkdtemp(buf);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string path;
};

// Minimal protobuf writing, enough for a TF2 scalar event.
std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) out.push_back(static_cast<char>((v & 0x7f) | 0x80)), v >>= 7;
  out.push_back(static_cast<char>(v));
  return out;
}
std::string field(int number, int wire, const std::string& payload) {
  std::string key = varint(static_cast<uint64_t>(number) << 3 | wire);
  return wire == 2 ? key + varint(payload.size()) + payload : key + payload;
}
std::string fixed64(double d) {
  std::string out(8, '\0');
  std::memcpy(&out[0], &d, 8);
  return out;
}

// Event{wall_time, step, summary{value{tag, metadata{plugin_data{"scalars"}},
// tensor{DT_FLOAT, float_val packed}}}} as tf.summary.scalar writes it.
std::string tf2_scalar_event(const std::string& tag, float value, int64_t step) {
  std::string f(4, '\0');
  std::memcpy(&f[0], &value, 4);
  std::string tensor = field(1, 0, varint(1)) + field(5, 2, f);
  std::string metadata = field(1, 2, field(1, 2, "scalars"));
  std::string v = field(1, 2, tag) + field(9, 2, metadata) + field(8, 2, tensor);
  return field(1, 1, fixed64(1700000000.0 + step)) + field(2, 0, varint(step)) +
         field(5, 2, field(1, 2, v));
}

TEST(ScalarBoard, ChorusRunsSideBySideAndATf2File) {
  TempDir tmp;
  {
    EventWriter train(tmp.path + "/train"), val(tmp.path + "/validation");
    for (int s = 0; s < 5; ++s) train.add_scalar("epoch_loss", 2.0f - 0.3f * s, s);
    for (int s = 0; s < 5; ++s) val.add_scalar("epoch_loss", 2.1f - 0.25f * s, s);
    train.add_scalar("epoch_accuracy", 0.5f, 0);
  }
  ::mkdir((tmp.path + "/tf2").c_str(), 0700);
  {
    std::ofstream f(tmp.path + "/tf2/events.out.tfevents.1700000000.host.1.v2", std::ios::binary);
    for (int s = 0; s < 3; ++s)
      f << frame_tfrecord(tf2_scalar_event("epoch_loss", 1.0f / (s + 1), s));
  }
  ScalarBoard board(tmp.path, std::chrono::milliseconds(0));
  EXPECT_EQ(board.runs(), (std::vector<std::string>{"tf2", "train", "validation"}));
  auto curves = board.curves();
  ASSERT_EQ(curves.size(), 2u);
  const auto& loss = curves.at("epoch_loss");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss[0].name, "tf2");
  ASSERT_EQ(loss[0].points.size(), 3u);
  EXPECT_FLOAT_EQ(loss[0].points[2].second, 1.0f / 3);
  EXPECT_EQ(loss[1].name, "train");
  EXPECT_EQ(loss[1].points.size(), 5u);
  EXPECT_FLOAT_EQ(loss[1].points[4].second, 2.0f - 0.3f * 4);
  std::string html = board.charts_html();
  EXPECT_NE(html.find("epoch_accuracy"), std::string::npos);
  EXPECT_EQ(html.find("class=\"error\""), std::string::npos);
}

TEST(ScalarBoard, FollowsGrowingFilesAndKeepsWhatWasReadOnDamage) {
  TempDir tmp;
  ScalarBoard board(tmp.path, std::chrono::milliseconds(0));
  EXPECT_TRUE(board.curves().empty());
  EXPECT_NE(board.charts_html().find("no scalars yet"), std::string::npos);
  EventWriter w(tmp.path);
  w.add_scalar("loss", 1.0f, 1);
  w.flush();
  EXPECT_EQ(board.curves().at("loss").at(0).points.size(), 1u);
  EXPECT_EQ(board.runs(), std::vector<std::string>{"."});
  w.add_scalar("loss", 0.5f, 2);
  w.flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a later mtime
  EXPECT_EQ(board.curves().at("loss").at(0).points.size(), 2u);
  // Half a record at the end (a writer mid-way): the points read before stay.
  {
    std::ofstream f(w.path(), std::ios::binary | std::ios::app);
    f << std::string("\x40\x00\x00", 3);
  }
  EXPECT_EQ(board.curves().at("loss").at(0).points.size(), 2u);
  EXPECT_EQ(board.errors().size(), 1u);
}

TEST(ScalarBoard, RescansAtMostOncePerPeriod) {
  TempDir tmp;
  ScalarBoard board(tmp.path, std::chrono::milliseconds(60000));
  EXPECT_TRUE(board.curves().empty());
  EventWriter w(tmp.path);
  w.add_scalar("loss", 1.0f, 1);
  w.flush();
  EXPECT_TRUE(board.curves().empty());  // not yet: the last scan is too recent
}

}  // namespace
}  // namespace chorus::web
