// The dispatch rules without sockets: FIFO, one step per worker, the staleness bound,
// rejoining counters, lost attempts, errors for join(), the no-worker clock.
#include "ps/coordinator/scheduler.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus::ps::coordinator {
namespace {

using std::chrono::milliseconds;

class SchedulerTest : public ::testing::Test {
 protected:
  std::shared_ptr<Step> step(const std::string& function = "f") {
    auto s = std::make_shared<Step>();
    s->id = next_id_++;
    s->function = function;
    s->value = std::make_shared<RemoteValue::State>();
    steps_.push_back(s);
    return s;
  }
  void push_n(Scheduler& s, int n) {
    for (int i = 0; i < n; ++i) s.push(step(), t0_);
  }
  static ReplyMsg ok(const Step& s, const std::string& result = "r") {
    ReplyMsg r;
    r.id = s.id;
    r.result = result;
    return r;
  }
  // Runs one step on `worker` to completion; false when none was allowed.
  static bool run_one(Scheduler& s, int worker) {
    auto taken = s.take(worker);
    if (!taken) return false;
    s.complete(worker, ok(*taken));
    return true;
  }

  Clock::time_point t0_ = Clock::now();
  int64_t next_id_ = 0;
  std::vector<std::shared_ptr<Step>> steps_;
};

TEST_F(SchedulerTest, HandsOutStepsInOrderOneAtATimePerWorker) {
  Scheduler s(-1, 5, t0_);
  s.add_worker(0);
  s.add_worker(1);
  push_n(s, 3);
  EXPECT_EQ(s.take(0)->id, 0);
  EXPECT_EQ(s.take(0), nullptr);  // busy
  EXPECT_EQ(s.take(1)->id, 1);
  s.complete(0, ok(*steps_[0], "zero"));
  EXPECT_EQ(s.take(0)->id, 2);
  EXPECT_EQ(steps_[0]->value->value, "zero");
  EXPECT_EQ(steps_[0]->value->worker, 0);
  EXPECT_EQ(s.outstanding(), 2);
}

TEST_F(SchedulerTest, ReplyForAnotherStepIsAProtocolError) {
  Scheduler s(-1, 5, t0_);
  s.add_worker(0);
  push_n(s, 2);
  s.take(0);
  EXPECT_THROW(s.complete(0, ok(*steps_[1])), IoError);
  EXPECT_THROW(s.complete(7, ok(*steps_[0])), IoError);
}

TEST_F(SchedulerTest, StalenessBoundsStartedAgainstTheSlowestFinished) {
  for (int bound : {0, 1, 4}) {
    SCOPED_TRACE(bound);
    Scheduler s(bound, 5, t0_);
    s.add_worker(0);
    s.add_worker(1);  // never finishes anything: worker 0 may start bound + 1 steps
    push_n(s, 20);
    int ran = 0;
    while (run_one(s, 0)) ++ran;
    EXPECT_EQ(ran, bound + 1);
    EXPECT_EQ(s.counters(0).started - s.min_finished(), bound + 1);
    ASSERT_TRUE(run_one(s, 1));  // the slow worker moves: one more for the fast one
    EXPECT_TRUE(run_one(s, 0));
    EXPECT_FALSE(run_one(s, 0));
  }
}

TEST_F(SchedulerTest, SlowestLeavingUnblocksTheOthers) {
  Scheduler s(0, 5, t0_);
  s.add_worker(0);
  s.add_worker(1);
  push_n(s, 5);
  ASSERT_TRUE(run_one(s, 0));
  EXPECT_FALSE(run_one(s, 0));
  s.remove_worker(1, t0_);
  EXPECT_TRUE(run_one(s, 0));
}

TEST_F(SchedulerTest, JoiningWorkerStartsAtTheCurrentMinimum) {
  Scheduler s(1, 5, t0_);
  s.add_worker(0);
  push_n(s, 20);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(run_one(s, 0));
  s.add_worker(1);
  EXPECT_EQ(s.counters(1).started, 6);
  EXPECT_EQ(s.counters(1).finished, 6);
  EXPECT_TRUE(run_one(s, 1));  // not stalled by its own zero count
  EXPECT_TRUE(run_one(s, 0));  // nor does it stall the others
}

TEST_F(SchedulerTest, LostStepGoesBackToTheFrontUntilMaxAttempts) {
  Scheduler s(-1, 2, t0_);
  push_n(s, 2);
  s.add_worker(0);
  auto first = s.take(0);
  s.remove_worker(0, t0_);
  s.add_worker(1);
  EXPECT_EQ(s.take(1), first);  // ahead of step 1
  EXPECT_EQ(first->value->attempts, 2);
  s.remove_worker(1, t0_);
  EXPECT_TRUE(first->value->done);
  EXPECT_THROW(std::rethrow_exception(first->value->error), UnavailableError);
  EXPECT_EQ(s.outstanding(), 1);
  EXPECT_THROW(std::rethrow_exception(s.take_first_error()), UnavailableError);
  EXPECT_EQ(s.take_first_error(), nullptr);  // reported once
}

TEST_F(SchedulerTest, WorkerErrorsKeepTheirKind) {
  EXPECT_THROW(std::rethrow_exception(step_error(2, "unavailable", "ps gone")), UnavailableError);
  try {
    std::rethrow_exception(step_error(2, "error", "bad"));
  } catch (const IoError&) {
    FAIL() << "a plain step error became an IoError";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "worker 2: bad");
  }
}

TEST_F(SchedulerTest, NoWorkerClockStartsWhenStepsWaitWithNobodyThere) {
  Scheduler s(-1, 5, t0_);
  milliseconds timeout(100);
  EXPECT_FALSE(s.no_worker_deadline(timeout));  // nothing waits
  auto later = t0_ + milliseconds(1000);
  s.push(step(), later);
  EXPECT_EQ(*s.no_worker_deadline(timeout), later + timeout);
  s.add_worker(0);
  EXPECT_FALSE(s.no_worker_deadline(timeout));
  auto taken = s.take(0);
  auto gone = later + milliseconds(500);
  s.remove_worker(0, gone);  // requeued: waits again from the moment the worker left
  EXPECT_EQ(*s.no_worker_deadline(timeout), gone + timeout);
  s.fail_queued(std::make_exception_ptr(UnavailableError("none")));
  EXPECT_EQ(s.outstanding(), 0);
  EXPECT_TRUE(taken->value->done);
}

}  // namespace
}  // namespace chorus::ps::coordinator
