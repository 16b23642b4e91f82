// Helpers for engine tests: N ranks as threads of this process, each with a Communicator
// over a real TcpStoreServer (tests/comm/comm_harness.h) and an Engine on it.
#pragma once

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "chorus/engine.h"
#include "comm/comm_harness.h"

namespace chorus::engine::testing {

using comm::testing::run_ranks;
using comm::testing::Transport;

// Options for tests: a short cycle, no stall inspector unless a test asks for one.
inline EngineOptions test_options() {
  EngineOptions o;
  o.cycle_time = std::chrono::microseconds(1000);
  o.stall_check = std::chrono::milliseconds(0);
  o.stall_shutdown = std::chrono::milliseconds(0);
  return o;
}

constexpr std::chrono::milliseconds kWait{20000};

class EngineGroup {
 public:
  explicit EngineGroup(int size, EngineOptions options = test_options(),
                       Transport transport = Transport::kTcp)
      : comms_(transport, size) {
    start(options);
  }
  ~EngineGroup() { stop(); }

  void start(const EngineOptions& options) {
    engines_.clear();
    for (int r = 0; r < comms_.size(); ++r) engines_.push_back(Engine::start(comms_[r], options));
  }
  // Shuts every engine down (the first shutdown stops them all at the same cycle).
  void stop() {
    run_ranks(size(), [&](int r) {
      if (engines_.size() > static_cast<size_t>(r) && engines_[r]) engines_[r]->shutdown();
    });
    engines_.clear();
  }

  int size() const { return comms_.size(); }
  Communicator& comm(int r) { return comms_[r]; }
  Engine& operator[](int r) { return *engines_[r]; }
  void run(const std::function<void(int, Engine&)>& fn) {
    run_ranks(size(), [&](int r) { fn(r, *engines_[r]); });
  }

 private:
  comm::testing::Group comms_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

// Runs fn and returns the message of the exception of type E it throws ("" if none).
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace chorus::engine::testing
