// The ps optimizer kernels against torch::optim's formulas, computed here in double for a
// few steps (the kernels work in float32, hence the relative tolerance).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "chorus/error.h"
#include "ps/optimizer_kernels.h"

namespace chorus::ps {
namespace {

struct Trajectory {
  explicit Trajectory(const OptimizerConfig& c, std::vector<float> p)
      : config(c), values(std::move(p)) {
    slot0.assign(values.size(), 0.0f);
    slot1.assign(values.size(), 0.0f);
  }
  void step(const std::vector<float>& grad) {
    ShardView view{values.data(), slot0.data(), slot1.data(), static_cast<int64_t>(values.size())};
    apply_update(config, config.learning_rate, view, grad.data(), ++steps);
  }
  OptimizerConfig config;
  std::vector<float> values, slot0, slot1;
  int64_t steps = 0;
};

const std::vector<std::vector<float>> kGrads = {
    {0.5f, -1.0f, 2.0f}, {0.25f, 0.0f, -3.0f}, {-0.75f, 1.5f, 0.125f}, {1.0f, -0.5f, 0.0f}};
const std::vector<float> kStart = {1.0f, -2.0f, 0.5f};

// torch.optim.SGD, dampening 0, in double.
using Values = std::array<double, 3>;

Values start_values() { return {kStart[0], kStart[1], kStart[2]}; }

Values sgd_reference(double lr, double momentum, bool nesterov, double wd) {
  Values p = start_values(), buf{};
  for (size_t t = 0; t < kGrads.size(); ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = kGrads[t][i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = t == 0 ? d : momentum * buf[i] + d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
  return p;
}

// torch.optim.Adam (amsgrad off), in double.
Values adam_reference(double lr, double b1, double b2, double eps, double wd) {
  Values p = start_values(), m{}, v{};
  for (size_t t = 0; t < kGrads.size(); ++t) {
    double bc1 = 1 - std::pow(b1, t + 1), bc2 = 1 - std::pow(b2, t + 1);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = kGrads[t][i] + wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      p[i] -= (lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
  return p;
}

void expect_close(const std::vector<float>& got, const Values& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i]))) << "element " << i;
  }
}

OptimizerConfig sgd_config(double lr, double momentum, bool nesterov, double wd) {
  OptimizerConfig c;
  c.learning_rate = lr;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

TEST(OptimizerKernels, PlainSgdIsExact) {
  Trajectory run(sgd_config(0.5, 0, false, 0), kStart);
  run.step(kGrads[0]);
  EXPECT_EQ(run.values, (std::vector<float>{0.75f, -1.5f, -0.5f}));  // p - 0.5 g, exact
}

TEST(OptimizerKernels, SgdVariantsFollowTorch) {
  struct Case {
    double lr, momentum;
    bool nesterov;
    double wd;
  };
  for (Case c : {Case{0.1, 0, false, 0}, Case{0.1, 0.9, false, 0}, Case{0.05, 0.9, true, 0},
                 Case{0.1, 0.5, false, 0.01}, Case{0.2, 0.8, true, 0.1}}) {
    Trajectory run(sgd_config(c.lr, c.momentum, c.nesterov, c.wd), kStart);
    for (const auto& g : kGrads) run.step(g);
    SCOPED_TRACE(::testing::Message()
                 << "momentum " << c.momentum << " nesterov " << c.nesterov << " wd " << c.wd);
    expect_close(run.values, sgd_reference(c.lr, c.momentum, c.nesterov, c.wd));
  }
}

TEST(OptimizerKernels, MomentumBufferStartsAsTheGradient) {
  Trajectory run(sgd_config(1.0, 0.9, false, 0), {0.0f});
  run.step({1.0f});  // b = 1 (not 0.9 * 0 + 1 via dampening): p = -1
  EXPECT_FLOAT_EQ(run.values[0], -1.0f);
  EXPECT_FLOAT_EQ(run.slot0[0], 1.0f);
  run.step({1.0f});  // b = 0.9 + 1 = 1.9: p = -2.9
  EXPECT_FLOAT_EQ(run.values[0], -2.9f);
}

TEST(OptimizerKernels, AdamFirstStepIsLrTimesSign) {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kAdam;
  c.learning_rate = 0.01;
  Trajectory run(c, kStart);
  run.step(kGrads[0]);
  // After bias correction m_hat = g and v_hat = g^2: the step is lr * g / (|g| + eps).
  EXPECT_NEAR(run.values[0], 1.0f - 0.01f, 1e-6);
  EXPECT_NEAR(run.values[1], -2.0f + 0.01f, 1e-6);
  EXPECT_NEAR(run.values[2], 0.5f - 0.01f, 1e-6);
}

TEST(OptimizerKernels, AdamFollowsTorch) {
  for (double wd : {0.0, 0.05}) {
    OptimizerConfig c;
    c.kind = OptimizerConfig::Kind::kAdam;
    c.learning_rate = 0.1;
    c.beta1 = 0.8;
    c.beta2 = 0.95;
    c.eps = 1e-6;
    c.weight_decay = wd;
    Trajectory run(c, kStart);
    for (const auto& g : kGrads) run.step(g);
    expect_close(run.values, adam_reference(0.1, 0.8, 0.95, 1e-6, wd));
  }
}

TEST(OptimizerKernels, SlotsAndChecks) {
  OptimizerConfig c;
  EXPECT_EQ(slot_count(c), 0);
  c.momentum = 0.9;
  EXPECT_EQ(slot_count(c), 1);
  c.kind = OptimizerConfig::Kind::kAdam;
  EXPECT_EQ(slot_count(c), 2);
  OptimizerConfig bad;
  bad.nesterov = true;
  EXPECT_THROW(check_optimizer(bad), InvalidArgument);
  bad = OptimizerConfig{};
  bad.learning_rate = -1;
  EXPECT_THROW(check_optimizer(bad), InvalidArgument);
  bad = OptimizerConfig{};
  bad.beta1 = 1.0;
  EXPECT_THROW(check_optimizer(bad), InvalidArgument);
  bad = OptimizerConfig{};
  bad.learning_rate = NAN;
  EXPECT_THROW(check_optimizer(bad), InvalidArgument);
}

}  // namespace
}  // namespace chorus::ps
