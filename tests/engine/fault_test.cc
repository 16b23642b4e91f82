// Faults under the engine, with every rank a real process (../common/forked_ranks.h): 3
// forked ranks each run an Engine and loop steps of four 1 MiB float32 allreduces, checking
// each result; then one rank is SIGKILLed or SIGSTOPped.
// Every survivor's pending handles must fail with a typed error within a bound (the engine
// thread's collective or its negotiation throws, the engine aborts the communicator and
// fails every handle with that error), and a later enqueue must fail with it too, at once.
#include "../common/forked_ranks.h"
#include "chorus/engine.h"

#include <functional>

namespace chorus::testing {
namespace {

constexpr int kTensors = 4;
constexpr size_t kCount = size_t{1} << 18;  // 1 MiB of float32 per tensor
constexpr auto kWait = std::chrono::seconds(30);

float contribution(int rank, int t, size_t i) { return static_cast<float>(rank + t + i % 5); }
float expected_sum(int t, size_t i) {
  float sum = 0;
  for (int r = 0; r < kRanks; ++r) sum += contribution(r, t, i);
  return sum;
}

class EngineFault : public ForkedRanks {
 protected:
  Record run_loop(Communicator& comm, int report_fd) override {
    auto engine = Engine::start(comm, EngineOptions::from_env());
    std::vector<std::vector<float>> in(kTensors, std::vector<float>(kCount));
    std::vector<std::vector<float>> out(kTensors, std::vector<float>(kCount));
    for (int t = 0; t < kTensors; ++t) {
      for (size_t i = 0; i < kCount; ++i) in[t][i] = contribution(comm.rank(), t, i);
    }
    for (int64_t rounds = 0;; ++rounds) {
      std::vector<Handle> handles;
      try {
        for (int t = 0; t < kTensors; ++t) {
          handles.push_back(engine->allreduce("grad/" + std::to_string(t), in[t].data(),
                                              out[t].data(), DataType::kFloat32,
                                              {static_cast<int64_t>(kCount)}));
        }
        for (auto& h : handles) h.wait(kWait);
      } catch (const std::exception& e) {
        Record failed = make_record(Record::kFailed, comm.rank(), rounds, &e);
        return every_handle_and_enqueue_fail_alike(*engine, handles, failed);
      }
      for (int t = 0; t < kTensors; ++t) {
        for (size_t i = 0; i < kCount; i += 997) {
          if (out[t][i] != expected_sum(t, i)) {
            return make_record(Record::kWrongResult, comm.rank(), rounds, nullptr);
          }
        }
      }
      if (rounds + 1 == kHealthyRounds) {
        write_record(report_fd, make_record(Record::kReady, comm.rank(), rounds + 1, nullptr));
      }
    }
  }

  // After the first failure: each of the step's other handles either finished before the
  // fault or fails with the same error type, and a new enqueue fails with it, all without
  // waiting. Otherwise the outcome is kWrongResult, saying what differed.
  static Record every_handle_and_enqueue_fail_alike(Engine& engine, std::vector<Handle>& handles,
                                                    Record failed) {
    auto same_type = [&](const std::function<void()>& f, const char* what,
                         bool may_succeed) -> bool {
      auto t0 = Clock::now();
      try {
        f();
      } catch (const std::exception& e) {
        if (std::strcmp(type_of(e), failed.error_type) == 0 &&
            Clock::now() - t0 < std::chrono::seconds(1)) {
          return true;
        }
        std::snprintf(failed.message, sizeof(failed.message), "%s threw %s: %s", what, type_of(e),
                      e.what());
        return false;
      }
      if (may_succeed && Clock::now() - t0 < std::chrono::seconds(1)) return true;
      std::snprintf(failed.message, sizeof(failed.message), "%s did not throw", what);
      return false;
    };
    bool ok = true;
    for (auto& h : handles) ok = ok && same_type([&] { h.wait(kWait); }, "a pending handle", true);
    float x = 1;
    ok = ok &&
         same_type([&] { engine.allreduce("later", &x, &x, DataType::kFloat32, {1}).wait(kWait); },
                   "a later enqueue", false);
    if (!ok) failed.kind = Record::kWrongResult;
    return failed;
  }
};

// A killed rank: every survivor's handles fail with IoError within 5 s (the 20 s timeout
// is not what ends them), the error naming a peer link.
TEST_P(EngineFault, KilledRankFailsEverySurvivorsHandlesWithIoError) {
  auto fault = signal_victim(SIGKILL, std::chrono::seconds(20), milliseconds(5000));
  ASSERT_EQ(fault.failures.size(), 2u);
  expect_io_errors_naming_a_peer(fault.failures);
  expect_exits(SIGKILL);
}

// A stopped rank: the survivors' handles fail at the communicator's timeout (1.5 s), at
// least one with TimeoutError ("timed out ..."), the other possibly with IoError once the
// first aborted its links; never a hang.
TEST_P(EngineFault, StoppedRankFailsEverySurvivorsHandlesAfterTheTimeout) {
  const milliseconds timeout(1500);
  auto [stopped_ns, failures] = signal_victim(SIGSTOP, timeout, timeout + milliseconds(3000));
  ASSERT_EQ(failures.size(), 2u);
  int timeouts = 0;
  for (const Record& r : failures) {
    EXPECT_GT(seconds_between(stopped_ns, r.at_ns), 1.0) << "failed long before the timeout";
    if (std::strcmp(r.error_type, "TimeoutError") == 0) {
      ++timeouts;
      EXPECT_NE(std::strstr(r.message, "timed out"), nullptr) << r.message;
    } else {
      EXPECT_STREQ(r.error_type, "IoError") << r.message;
    }
  }
  EXPECT_GE(timeouts, 1);
  expect_exits(SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Transports, EngineFault, ::testing::Values("tcp", "shm"), transport_name);

}  // namespace
}  // namespace chorus::testing
