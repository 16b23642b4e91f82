// ElasticSampler: an epoch visits every sample exactly once across resizes and rollbacks;
// the store format of the launcher's rounds. No libtorch headers (fast to compile).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "chorus/elastic.h"
#include "rendezvous/elastic_rounds.h"

namespace chorus::elastic {
namespace {

// Runs one epoch at the given size per step; returns how often each sample was trained.
std::map<int64_t, int> run_epoch(ElasticSampler& s, const std::vector<int>& sizes) {
  std::map<int64_t, int> seen;
  for (size_t step = 0; !s.epoch_done(); ++step) {
    const int size = sizes[std::min(step, sizes.size() - 1)];
    for (int r = 0; r < size; ++r) {
      for (int64_t i : s.next_batch(r, size)) ++seen[i];
    }
    s.record_step(size);
  }
  return seen;
}

void expect_each_once(const std::map<int64_t, int>& seen, int64_t n) {
  ASSERT_EQ(static_cast<int64_t>(seen.size()), n);
  for (const auto& [index, count] : seen) {
    EXPECT_TRUE(index >= 0 && index < n) << index;
    EXPECT_EQ(count, 1) << "sample " << index;
  }
}

TEST(ElasticSampler, EveryStepSizeSequenceVisitsEachSampleOnce) {
  for (int64_t n : {0, 1, 7, 100, 1001}) {
    ElasticSampler s(n, 4, {true, 3, false});
    expect_each_once(run_epoch(s, {3, 3, 2, 2, 5, 1, 4}), n);
    s.set_epoch(1);
    expect_each_once(run_epoch(s, {1}), n);
  }
}

TEST(ElasticSampler, FullStepsGiveWholeBatchesAndTheLastSplitsTheRest) {
  ElasticSampler s(10, 3, {false, 0, false});
  EXPECT_EQ(s.next_batch(0, 2), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(s.next_batch(1, 2), (std::vector<int64_t>{3, 4, 5}));
  s.record_step(2);
  EXPECT_EQ(s.processed(), 6);
  EXPECT_EQ(s.next_batch(0, 3), (std::vector<int64_t>{6}));
  EXPECT_EQ(s.next_batch(1, 3), (std::vector<int64_t>{7}));
  EXPECT_EQ(s.next_batch(2, 3), (std::vector<int64_t>{8, 9}));
  s.record_step(3);
  EXPECT_TRUE(s.epoch_done());
  EXPECT_TRUE(s.next_batch(0, 3).empty());
}

TEST(ElasticSampler, RollingBackToSavedProgressRedoesOnlyTheLostSteps) {
  ElasticSampler s(50, 5, {true, 9, false});
  std::map<int64_t, int> seen;
  auto step = [&](int size) {
    for (int r = 0; r < size; ++r) {
      for (int64_t i : s.next_batch(r, size)) ++seen[i];
    }
    s.record_step(size);
  };
  step(3);
  const ElasticSampler::Progress committed = s.progress();
  std::map<int64_t, int> committed_seen = seen;
  step(3);  // lost: the world failed before it was committed
  seen = committed_seen;
  s.set_progress(committed);
  while (!s.epoch_done()) step(2);
  expect_each_once(seen, 50);
}

TEST(ElasticSampler, RejectsBadArguments) {
  EXPECT_THROW(ElasticSampler(-1, 4), InvalidArgument);
  EXPECT_THROW(ElasticSampler(10, 0), InvalidArgument);
  ElasticSampler s(10, 2);
  EXPECT_THROW(s.next_batch(2, 2), InvalidArgument);
  EXPECT_THROW(s.record_step(0), InvalidArgument);
  EXPECT_THROW(s.set_progress({0, 11}), InvalidArgument);
}

TEST(ElasticRounds, MembersRoundTripAndMalformedTextIsRefused) {
  namespace er = elastic_rounds;
  std::vector<er::Member> members = {{"w0", "hostA"}, {"w3", "hostB"}};
  auto back = er::decode(er::encode(members));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].id, "w3");
  EXPECT_EQ(back[1].host, "hostB");
  EXPECT_EQ(er::index_of(back, "w3"), 1);
  EXPECT_EQ(er::index_of(back, "w9"), -1);
  EXPECT_TRUE(er::decode("").empty());
  try {
    er::decode("w0 a\nw1\n");
    FAIL() << "a line without a host was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(er::decode("w0 a\nw0 b\n"), InvalidArgument);
  EXPECT_THROW(er::decode("w0 a extra\n"), InvalidArgument);
}

}  // namespace
}  // namespace chorus::elastic
