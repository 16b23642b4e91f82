// Coordinator and worker threads on loopback: results, FIFO order, error types, bounded
// staleness, timeouts, shutdown. Time limits here only guard against hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "chorus/error.h"
#include "chorus/ps/coordinator.h"
#include "test_util.h"

namespace chorus::ps {
namespace {

using std::chrono::milliseconds;
using testing::address_of;
using testing::test_secret;
using testing::throws_as;
using testing::WorkerThread;

constexpr milliseconds kWait{20000};

std::string square(const std::string& function, const std::string& argument) {
  if (function != "square") throw std::invalid_argument("unknown step function " + function);
  int64_t x = std::stoll(argument);
  return std::to_string(x * x);
}

TEST(CoordinatorTest, ResultsAreCorrectAndEveryStepRunsOnce) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  std::mutex mu;
  std::map<std::string, int> runs;
  auto handler = [&](const std::string& f, const std::string& a) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++runs[a];
    }
    return square(f, a);
  };
  std::vector<std::unique_ptr<WorkerThread>> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(std::make_unique<WorkerThread>(coordinator.port(), i, handler));
  }
  coordinator.wait_for_workers(3, kWait);
  EXPECT_EQ(coordinator.num_live_workers(), 3);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 100; ++i) values.push_back(coordinator.schedule("square", std::to_string(i)));
  coordinator.join();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(values[i].ready());
    EXPECT_EQ(values[i].get(), std::to_string(i * i));
    EXPECT_GE(values[i].worker(), 0);
    EXPECT_LT(values[i].worker(), 3);
    EXPECT_EQ(values[i].attempts(), 1);
    EXPECT_EQ(runs[std::to_string(i)], 1) << "step " << i;
  }
  coordinator.shutdown_workers();
  for (auto& w : workers) {
    w->join();
    EXPECT_EQ(w->error(), nullptr) << w->error_text();
  }
}

TEST(CoordinatorTest, OneWorkerRunsStepsInTheOrderTheyWereScheduled) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  std::vector<std::string> order;  // only the worker thread writes it before join()
  WorkerThread worker(coordinator.port(), 0, [&](const std::string&, const std::string& a) {
    order.push_back(a);
    return a;
  });
  testing::ShutdownOnExit bye(coordinator);
  for (int i = 0; i < 50; ++i) coordinator.schedule("record", std::to_string(i));
  coordinator.join();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], std::to_string(i));
}

std::string failing(const std::string& function, const std::string&) {
  if (function == "unavailable") throw UnavailableError("ps 1 is gone");
  if (function == "fail") throw std::runtime_error("bad input");
  if (function == "weird") throw 42;
  return "ok";
}

TEST(CoordinatorTest, StepErrorsKeepTheirKindAndMessageAndAreNotRetried) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  WorkerThread worker(coordinator.port(), 7, failing);
  testing::ShutdownOnExit bye(coordinator);
  RemoteValue unavailable = coordinator.schedule("unavailable", "");
  RemoteValue failed = coordinator.schedule("fail", "");
  RemoteValue weird = coordinator.schedule("weird", "");
  RemoteValue fine = coordinator.schedule("ok", "");
  std::string text;
  ASSERT_TRUE(throws_as<UnavailableError>(unavailable, &text));
  EXPECT_NE(text.find("worker 7: "), std::string::npos) << text;
  EXPECT_NE(text.find("ps 1 is gone"), std::string::npos) << text;
  ASSERT_TRUE(throws_as<Error>(failed, &text));
  EXPECT_FALSE(throws_as<IoError>(failed));
  EXPECT_EQ(text, "worker 7: bad input");
  EXPECT_TRUE(throws_as<Error>(weird));
  EXPECT_EQ(fine.get(), "ok");  // the worker kept serving after the errors
  EXPECT_EQ(unavailable.attempts(), 1);
  EXPECT_EQ(failed.attempts(), 1);
  // join() raises the first error once; the next join() starts clean.
  try {
    coordinator.join();
    FAIL() << "join() did not raise";
  } catch (const UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("ps 1 is gone"), std::string::npos);
  }
  EXPECT_NO_THROW(coordinator.join());
  coordinator.schedule("fail", "");
  EXPECT_THROW(coordinator.join(), Error);
}

// Records, as each step starts, how far its worker is ahead of the slowest finished count.
class StalenessProbe {
 public:
  std::string run(int worker, const std::string& argument, milliseconds work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t ahead = started_[worker] - std::min(finished_[0], finished_[1]);
      max_ahead_ = std::max(max_ahead_, ahead);
      ++started_[worker];
    }
    std::this_thread::sleep_for(work);
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_[worker];
    return argument;
  }
  int64_t max_ahead() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_ahead_;
  }
  int64_t started(int worker) {
    std::lock_guard<std::mutex> lock(mu_);
    return started_[worker];
  }

 private:
  std::mutex mu_;
  int64_t started_[2] = {0, 0};
  int64_t finished_[2] = {0, 0};
  int64_t max_ahead_ = 0;
};

class StalenessTest : public ::testing::TestWithParam<int> {};

TEST_P(StalenessTest, FastWorkerNeverRunsMoreThanSAhead) {
  const int s = GetParam();
  CoordinatorOptions options;
  options.max_staleness = s;
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  StalenessProbe probe;
  WorkerThread fast(coordinator.port(), 0, [&](const std::string&, const std::string& a) {
    return probe.run(0, a, milliseconds(0));
  });
  WorkerThread slow(coordinator.port(), 1, [&](const std::string&, const std::string& a) {
    return probe.run(1, a, milliseconds(30));
  });
  testing::ShutdownOnExit bye(coordinator);
  coordinator.wait_for_workers(2, kWait);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 30; ++i) values.push_back(coordinator.schedule("step", std::to_string(i)));
  coordinator.join();
  for (int i = 0; i < 30; ++i) EXPECT_EQ(values[i].get(), std::to_string(i));
  EXPECT_LE(probe.max_ahead(), s);
  EXPECT_EQ(probe.started(0) + probe.started(1), 30);
  EXPECT_GT(probe.started(1), 0);  // the slow worker was not starved
}

INSTANTIATE_TEST_SUITE_P(Bounds, StalenessTest, ::testing::Values(0, 1, 3));

TEST(CoordinatorTest, StepsFailWithUnavailableWhenNoWorkerConnects) {
  CoordinatorOptions options;
  options.no_worker_timeout = milliseconds(300);
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  RemoteValue value = coordinator.schedule("square", "3");
  std::string text;
  ASSERT_TRUE(throws_as<UnavailableError>(value, &text));
  EXPECT_NE(text.find("no worker connected for 0.3 s"), std::string::npos) << text;
  EXPECT_EQ(value.attempts(), 0);
  EXPECT_THROW(coordinator.join(), UnavailableError);
  // A worker arriving later serves new steps.
  WorkerThread worker(coordinator.port(), 0, square);
  testing::ShutdownOnExit bye(coordinator);
  coordinator.wait_for_workers(1, kWait);
  EXPECT_EQ(coordinator.schedule("square", "4").get(), "16");
}

TEST(CoordinatorTest, WaitForWorkersTimesOut) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  EXPECT_THROW(coordinator.wait_for_workers(1, milliseconds(100)), TimeoutError);
}

TEST(CoordinatorTest, ShutdownReturnsWorkersAndLaterJoinersCleanly) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  WorkerThread a(coordinator.port(), 0, square);
  WorkerThread b(coordinator.port(), 1, square);
  coordinator.wait_for_workers(2, kWait);
  EXPECT_EQ(coordinator.schedule("square", "5").get(), "25");
  coordinator.shutdown_workers();
  a.join();
  b.join();
  EXPECT_EQ(a.error(), nullptr) << a.error_text();
  EXPECT_EQ(b.error(), nullptr) << b.error_text();
  WorkerThread late(coordinator.port(), 2, square);
  late.join();
  EXPECT_EQ(late.error(), nullptr) << late.error_text();
  EXPECT_THROW(coordinator.schedule("square", "6").get(), UnavailableError);
  EXPECT_TRUE(testing::eventually([&] { return coordinator.num_live_workers() == 0; }));
}

// The step outlasts the heartbeat timeout: the worker must keep answering pings after the
// shutdown frame, or the coordinator would drop it as dead and fail the step.
TEST(CoordinatorTest, ShutdownLetsARunningStepFinish) {
  CoordinatorOptions options;
  options.heartbeat_timeout = milliseconds(300);
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  std::atomic<bool> started{false};
  WorkerThread worker(coordinator.port(), 0, [&](const std::string&, const std::string&) {
    started = true;
    std::this_thread::sleep_for(milliseconds(1200));
    return std::string("done");
  });
  RemoteValue running = coordinator.schedule("slow", "");
  RemoteValue queued = coordinator.schedule("slow", "");
  ASSERT_TRUE(testing::eventually([&] { return started.load(); }));
  coordinator.shutdown_workers();
  EXPECT_EQ(running.get(), "done");
  EXPECT_THROW(queued.get(), UnavailableError);
  worker.join();
  EXPECT_EQ(worker.error(), nullptr) << worker.error_text();
}

TEST(CoordinatorTest, DestructorReturnsWorkersAndFailsWaitingSteps) {
  RemoteValue pending;
  std::unique_ptr<WorkerThread> worker;
  {
    Coordinator coordinator("127.0.0.1", 0, test_secret());
    worker = std::make_unique<WorkerThread>(coordinator.port(), 0, square);
    coordinator.wait_for_workers(1, kWait);
    EXPECT_EQ(coordinator.schedule("square", "2").get(), "4");
    pending = coordinator.schedule("square", "x");  // may or may not have run
  }
  worker->join();
  EXPECT_EQ(worker->error(), nullptr) << worker->error_text();
  EXPECT_TRUE(pending.ready());
}

TEST(CoordinatorTest, LongStepIsNotMistakenForADeadWorker) {
  CoordinatorOptions options;
  options.heartbeat_timeout = milliseconds(300);
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  WorkerThread worker(coordinator.port(), 0, [](const std::string&, const std::string&) {
    std::this_thread::sleep_for(milliseconds(1500));
    return std::string("slow but alive");
  });
  testing::ShutdownOnExit bye(coordinator);
  RemoteValue value = coordinator.schedule("long", "");
  EXPECT_EQ(value.get(), "slow but alive");
  EXPECT_EQ(value.attempts(), 1);
}

TEST(CoordinatorTest, WorkerRetriesUntilTheCoordinatorListens) {
  uint16_t port = testing::free_port();
  WorkerThread worker(port, 0, square);
  std::this_thread::sleep_for(milliseconds(300));  // the worker meets refused connections
  Coordinator coordinator("127.0.0.1", port, test_secret());
  EXPECT_EQ(coordinator.schedule("square", "9").get(), "81");
}

TEST(CoordinatorTest, WorkerGivesUpAfterConnectTimeout) {
  uint16_t port = testing::free_port();
  EXPECT_THROW(serve_coordinator(address_of(port), 0, test_secret(), square, milliseconds(200)),
               TimeoutError);
}

TEST(CoordinatorTest, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  EXPECT_THROW(coordinator.schedule("", "x"), InvalidArgument);
  EXPECT_THROW(coordinator.schedule(std::string(257, 'f'), "x"), InvalidArgument);
  EXPECT_THROW(RemoteValue().get(), InvalidArgument);
  EXPECT_THROW(serve_coordinator(address_of(coordinator.port()), -1, test_secret(), square),
               InvalidArgument);
  EXPECT_THROW(Coordinator("127.0.0.1", 0, Secret()), InvalidArgument);
  coordinator.join();  // nothing was scheduled
}

}  // namespace
}  // namespace chorus::ps
