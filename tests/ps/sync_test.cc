// UpdateMode::kSync: num_workers pushes make one mean update, versions, stale pushes,
// pulls that wait for a version.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "ps_test_util.h"

namespace chorus::ps::testing {
namespace {

class SyncMode : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = test_layout(2);
    chief_ = make_client(cluster_);
    chief_->create(layout_, Arrays::filled(layout_.variables, 10.0f).in(),
                   sgd(1.0, UpdateMode::kSync, 3));
    for (int w = 0; w < 3; ++w) {
      workers_.push_back(make_client(cluster_));
      workers_.back()->wait_for_variables(test_variables());
    }
  }
  Arrays pull_all(PsClient& client, int64_t min_version, int64_t* version = nullptr) {
    Arrays got = Arrays::filled(layout_.variables, 0.0f);
    int64_t v = client.pull(got.out(), min_version);
    if (version) *version = v;
    return got;
  }

  LocalCluster cluster_{2};
  ModelLayout layout_;
  std::unique_ptr<PsClient> chief_;
  std::vector<std::unique_ptr<PsClient>> workers_;
};

TEST_F(SyncMode, NPushesMakeOneMeanUpdate) {
  // A pull for version 1 waits for the round to complete.
  auto reader = make_client(cluster_);
  reader->wait_for_variables({});
  auto waiting = std::async(std::launch::async, [&] {
    int64_t version = 0;
    Arrays got = pull_all(*reader, 1, &version);
    return std::make_pair(version, got.data[0][0]);
  });
  workers_[0]->push(Arrays::filled(layout_.variables, 1.0f).in(), 0);
  workers_[1]->push(Arrays::filled(layout_.variables, 2.0f).in(), 0);
  EXPECT_EQ(waiting.wait_for(milliseconds(300)), std::future_status::timeout);
  EXPECT_EQ(pull_all(*chief_, 0).data[0][0], 10.0f);  // nothing applied before the 3rd push
  workers_[2]->push(Arrays::filled(layout_.variables, 6.0f).in(), 0);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto [version, value] = waiting.get();
  EXPECT_EQ(version, 1);
  EXPECT_EQ(value, 10.0f - (1.0f + 2.0f + 6.0f) / 3);  // the mean, applied once
  for (int p = 0; p < 2; ++p) EXPECT_EQ(chief_->stats(p).version, 1);
}

TEST_F(SyncMode, StalePushIsDroppedAndCounted) {
  for (auto& w : workers_) w->push(Arrays::filled(layout_.variables, 3.0f).in(), 0);
  workers_[0]->push(Arrays::filled(layout_.variables, 100.0f).in(), 0);  // a retried step
  int64_t version = 0;
  Arrays got = pull_all(*chief_, 1, &version);
  EXPECT_EQ(version, 1);
  EXPECT_EQ(got.data[2][0], 7.0f);
  PsStats stats = chief_->stats(0);
  EXPECT_EQ(stats.pushes_dropped, 1);
  EXPECT_EQ(stats.pushes_applied, 3);
}

TEST_F(SyncMode, PushFromTheFutureIsAnError) {
  try {
    workers_[0]->push(Arrays::filled(layout_.variables, 1.0f).in(), 5);
    ADD_FAILURE() << "no InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(
                              "push for version 5 but the parameter server is at version 0"));
  }
  workers_[0]->push(Arrays::filled(layout_.variables, 1.0f).in(), 0);  // the connection is fine
}

TEST_F(SyncMode, PullForAFutureVersionTimesOut) {
  auto impatient = make_client(cluster_, milliseconds(300));
  impatient->wait_for_variables({});
  auto start = Clock::now();
  EXPECT_THROW(pull_all(*impatient, 1), TimeoutError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(pull_all(*impatient, 0).data[0][0], 10.0f);  // a timeout leaves it usable
}

TEST_F(SyncMode, RoundsFollowEachOther) {
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> threads;
    for (auto& w : workers_) {
      threads.emplace_back([&, round] {
        pull_all(*w, round);
        w->push(Arrays::filled(layout_.variables, 1.0f).in(), round);
      });
    }
    for (auto& t : threads) t.join();
  }
  int64_t version = 0;
  Arrays got = pull_all(*chief_, 5, &version);
  EXPECT_EQ(version, 5);
  EXPECT_EQ(got.data[1][100], 5.0f);
}

}  // namespace
}  // namespace chorus::ps::testing
