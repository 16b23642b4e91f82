// Helpers shared by the parameter-server tests: servers on loopback in this process, a
// layout, and filled arrays.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "chorus/ps/client.h"
#include "chorus/ps/server.h"
#include "util/deadline.h"

namespace chorus::ps::testing {

using std::chrono::milliseconds;

inline Secret test_secret() { return Secret("ps-test-secret"); }

// `n` parameter servers on 127.0.0.1, each on a free port.
struct LocalCluster {
  explicit LocalCluster(int n, Secret secret = test_secret()) {
    for (int i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<ParameterServer>("127.0.0.1", 0, secret));
      addresses.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
    }
  }

  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::string> addresses;
};

inline std::unique_ptr<PsClient> make_client(const LocalCluster& c,
                                             milliseconds timeout = milliseconds(20000),
                                             Secret secret = test_secret()) {
  return std::make_unique<PsClient>(c.addresses, std::move(secret), timeout);
}

// Variables of uneven sizes, split so that most of them span several ps.
inline std::vector<VariableSpec> test_variables() {
  return {{"embedding", 1000}, {"dense/kernel", 333}, {"dense/bias", 7}, {"out", 50}};
}

inline ModelLayout test_layout(int num_ps, int64_t max_shard = 128) {
  ModelLayout layout;
  layout.variables = test_variables();
  layout.shards = size_balanced(layout.variables, num_ps, max_shard);
  return layout;
}

// One array per variable, element j of variable i = base + i * 1000 + j (exact in float).
struct Arrays {
  Arrays(const std::vector<VariableSpec>& vars, float base) {
    for (size_t i = 0; i < vars.size(); ++i) {
      data.emplace_back(static_cast<size_t>(vars[i].numel));
      for (size_t j = 0; j < data.back().size(); ++j) {
        data.back()[j] = base + static_cast<float>(i * 1000 + j);
      }
    }
  }
  static Arrays filled(const std::vector<VariableSpec>& vars, float value) {
    Arrays a(vars, 0);
    for (auto& v : a.data) std::fill(v.begin(), v.end(), value);
    return a;
  }
  std::vector<const float*> in() const {
    std::vector<const float*> out;
    for (auto& v : data) out.push_back(v.data());
    return out;
  }
  std::vector<float*> out() {
    std::vector<float*> p;
    for (auto& v : data) p.push_back(v.data());
    return p;
  }
  std::vector<std::vector<float>> data;
};

inline CreateOptions sgd(double lr, UpdateMode mode = UpdateMode::kAsync, int workers = 1) {
  CreateOptions o;
  o.optimizer.learning_rate = lr;
  o.mode = mode;
  o.num_workers = workers;
  return o;
}

}  // namespace chorus::ps::testing
