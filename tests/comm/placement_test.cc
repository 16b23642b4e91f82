// Rank 0's choice between the streaming ring's near and far modes (comm/placement.h): each
// mode twice (the first a warm-up), then the one faster lately, the other again now and then at
// growing intervals, and a switch as soon as the other turns out faster. Two ranks agreeing on it
// over real links are in streaming_test.cc.
#include "comm/placement.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace chorus::comm {
namespace {

using std::chrono::nanoseconds;
constexpr size_t kBytes = size_t{16} << 20;

// Runs one call: asks for the mode, "runs" it at `near_ns` or `far_ns`, returns the mode.
bool call(PlacementChooser& c, int64_t near_ns, int64_t far_ns) {
  bool far = c.next_far();
  c.ran(kBytes, nanoseconds(far ? far_ns : near_ns));
  return far;
}

// The calls (1, 2, ...) that ran the mode `far` among the next `n`.
std::string calls_in(PlacementChooser& c, bool far, int n, int64_t near_ns, int64_t far_ns) {
  std::string which;
  for (int i = 1; i <= n; ++i) {
    if (call(c, near_ns, far_ns) == far) which += std::to_string(i) + " ";
  }
  return which;
}

// Near, far, near, far: the first of each warms its memory up and is not counted.
void start(PlacementChooser& c, int64_t near_ns, int64_t far_ns) {
  for (bool far : {false, true, false, true}) EXPECT_EQ(call(c, near_ns, far_ns), far);
}

TEST(PlacementChooser, TriesBothThenKeepsTheFasterAndRetriesTheOtherLessAndLessOften) {
  PlacementChooser c;
  start(c, 1000, 3000);
  // Near is faster: far again on the 8th call after, then 16, 32, and every 64 from there.
  EXPECT_EQ(calls_in(c, /*far=*/true, 250, 1000, 3000), "8 24 56 120 184 248 ");
}

TEST(PlacementChooser, FarCoresKeepFar) {
  PlacementChooser c;
  start(c, 3000, 1000);
  EXPECT_EQ(calls_in(c, /*far=*/false, 60, 3000, 1000), "8 24 56 ");
}

// The host moves the cores: far was faster, now near is. Far, still chosen, slows to near's
// old time (its average climbs to just under it); the next retry of near, 32 calls after the
// last, finds it faster, the choice turns to near at once, and retries start again at 8.
TEST(PlacementChooser, SwitchesWhenARetryFindsTheOtherFaster) {
  PlacementChooser c;
  start(c, 3000, 1000);
  EXPECT_EQ(calls_in(c, /*far=*/false, 30, 3000, 1000), "8 24 ");  // 6 calls since the retry
  EXPECT_EQ(calls_in(c, /*far=*/false, 26, 1000, 3000), "26 ");    // the cores move
  EXPECT_EQ(calls_in(c, /*far=*/true, 30, 1000, 3000), "8 24 ");
}

// A mode that turns slow while chosen loses within a call or two, without waiting for a
// retry: half the weight is on the newest call.
TEST(PlacementChooser, AChosenModeThatTurnsSlowLosesAtOnce) {
  PlacementChooser c;
  start(c, 1000, 2000);
  EXPECT_FALSE(call(c, 1000, 2000));
  EXPECT_FALSE(call(c, 5000, 2000));  // near now takes 5000: its average 3000
  EXPECT_TRUE(call(c, 5000, 2000));   // far's 2000 is faster
  EXPECT_TRUE(call(c, 5000, 2000));
}

// A mode's first call pays for touching its memory first: were it counted, near would look
// 50x slower than it is and lose to far until a retry.
TEST(PlacementChooser, TheFirstCallOfEachModeIsNotCounted) {
  PlacementChooser c;
  EXPECT_FALSE(call(c, 50000, 3000));
  EXPECT_TRUE(call(c, 1000, 3000));
  EXPECT_FALSE(call(c, 1000, 3000));
  EXPECT_TRUE(call(c, 1000, 3000));
  EXPECT_FALSE(call(c, 1000, 3000));
}

TEST(PlacementChooser, EmptyCallsTeachNothing) {
  PlacementChooser c;
  EXPECT_FALSE(c.next_far());
  c.ran(0, nanoseconds(5));
  EXPECT_FALSE(c.next_far());  // near still not run
}

}  // namespace
}  // namespace chorus::comm
