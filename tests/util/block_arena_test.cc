// BlockArena (util/block_arena.h): best fit, splits and merges, exhaustion, double frees,
// and a random workload checked against a model of which bytes are live.
#include "util/block_arena.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace chorus {
namespace {

constexpr size_t kPage = 4096;

TEST(BlockArena, BlocksAreGranulesFromTheStart) {
  BlockArena arena(100 * kPage + 5, kPage);
  EXPECT_EQ(arena.capacity(), 100 * kPage);
  EXPECT_EQ(arena.allocate(1), 0u);
  EXPECT_EQ(arena.allocate(kPage), kPage);
  EXPECT_EQ(arena.allocate(kPage + 1), 2 * kPage);
  EXPECT_EQ(arena.live_blocks(), 3u);
  EXPECT_EQ(arena.live_bytes(), 4 * kPage);
  EXPECT_EQ(arena.allocate(0), std::nullopt);
}

TEST(BlockArena, TheSmallestFreeRangeThatFitsIsTaken) {
  BlockArena arena(100 * kPage, kPage);
  size_t a = *arena.allocate(8 * kPage), b = *arena.allocate(kPage), c = *arena.allocate(2 * kPage),
         d = *arena.allocate(kPage);
  ASSERT_TRUE(arena.release(a));  // a hole of 8 pages
  ASSERT_TRUE(arena.release(c));  // a hole of 2 pages
  EXPECT_EQ(arena.allocate(2 * kPage), c);
  EXPECT_EQ(arena.allocate(3 * kPage), a);              // the 8-page hole, split
  EXPECT_EQ(arena.allocate(5 * kPage), a + 3 * kPage);  // its rest, exactly
  (void)b;
  (void)d;
}

TEST(BlockArena, FreedNeighboursMergeSoTheWholeRangeComesBack) {
  BlockArena arena(10 * kPage, kPage);
  size_t a = *arena.allocate(3 * kPage), b = *arena.allocate(3 * kPage),
         c = *arena.allocate(4 * kPage);
  EXPECT_EQ(arena.allocate(1), std::nullopt) << "full";
  ASSERT_TRUE(arena.release(a));
  ASSERT_TRUE(arena.release(c));
  EXPECT_EQ(arena.allocate(5 * kPage), std::nullopt) << "two holes of 3 and 4 pages";
  ASSERT_TRUE(arena.release(b));  // merges with both
  EXPECT_EQ(arena.live_blocks(), 0u);
  EXPECT_EQ(arena.allocate(10 * kPage), 0u);
}

TEST(BlockArena, ReleasingWhatIsNotALiveBlockChangesNothing) {
  BlockArena arena(10 * kPage, kPage);
  size_t a = *arena.allocate(2 * kPage);
  EXPECT_FALSE(arena.release(a + kPage));  // inside a block
  EXPECT_FALSE(arena.release(5 * kPage));  // free space
  EXPECT_TRUE(arena.release(a));
  EXPECT_FALSE(arena.release(a));  // twice
  EXPECT_EQ(arena.live_blocks(), 0u);
  EXPECT_EQ(arena.allocate(10 * kPage), 0u);
}

TEST(BlockArena, ARandomWorkloadNeverOverlapsAndAccountsEveryByte) {
  BlockArena arena(1000 * kPage, kPage);
  std::map<size_t, size_t> live;  // offset -> rounded bytes
  std::mt19937 rng(7);
  size_t failures = 0;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && rng() % 2 == 0) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(arena.release(it->first));
      live.erase(it);
    } else {
      size_t bytes = 1 + rng() % (40 * kPage);
      auto got = arena.allocate(bytes);
      if (!got) {
        ++failures;
        continue;
      }
      size_t rounded = (bytes + kPage - 1) / kPage * kPage;
      ASSERT_EQ(*got % kPage, 0u);
      ASSERT_LE(*got + rounded, arena.capacity());
      auto next = live.lower_bound(*got);
      if (next != live.end()) {
        ASSERT_LE(*got + rounded, next->first) << "overlaps the next";
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, *got) << "overlaps the previous";
      }
      live[*got] = rounded;
    }
    size_t bytes = 0;
    for (const auto& [offset, n] : live) bytes += n;
    ASSERT_EQ(arena.live_bytes(), bytes);
    ASSERT_EQ(arena.live_blocks(), live.size());
  }
  EXPECT_GT(failures, 0u) << "the workload never filled the arena";
  for (const auto& [offset, n] : live) ASSERT_TRUE(arena.release(offset));
  EXPECT_EQ(arena.allocate(1000 * kPage), 0u) << "everything merged back";
}

}  // namespace
}  // namespace chorus
