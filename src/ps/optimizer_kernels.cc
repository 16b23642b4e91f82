// torch/csrc/api/src/optim/{sgd,adam}.cpp, element by element:
//   SGD:  d = g + wd*p; b = (step == 1) ? d : m*b + d; d = nesterov ? d + m*b : b;
//         p = p + (-lr)*d
//   Adam: g = g + wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
//         denom = sqrt(v) / sqrt(1 - b2^t) + eps; p = p + ((-(lr / (1 - b1^t))) * m) / denom
// The bias corrections are computed in double, like torch, then used as float scalars.
#include "optimizer_kernels.h"

#include <cmath>

#include "chorus/error.h"

namespace chorus::ps {
namespace {

void sgd(const OptimizerConfig& c, double lr, const ShardView& s, const float* g, int64_t step) {
  const float wd = static_cast<float>(c.weight_decay);
  const float m = static_cast<float>(c.momentum);
  const float neg_lr = static_cast<float>(-lr);
  const bool first = step == 1;
  for (int64_t i = 0; i < s.length; ++i) {
    float d = c.weight_decay != 0 ? g[i] + wd * s.values[i] : g[i];
    if (c.momentum != 0) {
      float b = first ? d : s.slot0[i] * m + d;
      s.slot0[i] = b;
      d = c.nesterov ? d + m * b : b;
    }
    s.values[i] = s.values[i] + neg_lr * d;
  }
}

void adam(const OptimizerConfig& c, double lr, const ShardView& s, const float* g, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias1 = 1 - std::pow(c.beta1, t);
  const double bias2 = 1 - std::pow(c.beta2, t);
  const float wd = static_cast<float>(c.weight_decay);
  const float b1 = static_cast<float>(c.beta1), one_b1 = static_cast<float>(1 - c.beta1);
  const float b2 = static_cast<float>(c.beta2), one_b2 = static_cast<float>(1 - c.beta2);
  const float sqrt_bias2 = static_cast<float>(std::sqrt(bias2));
  const float eps = static_cast<float>(c.eps);
  const float neg_step = static_cast<float>(-(lr / bias1));
  for (int64_t i = 0; i < s.length; ++i) {
    float grad = c.weight_decay != 0 ? g[i] + wd * s.values[i] : g[i];
    float m = s.slot0[i] * b1 + one_b1 * grad;
    float v = s.slot1[i] * b2 + one_b2 * grad * grad;
    s.slot0[i] = m;
    s.slot1[i] = v;
    float denom = std::sqrt(v) / sqrt_bias2 + eps;
    s.values[i] = s.values[i] + neg_step * m / denom;  // addcdiv: (value * t1) / t2
  }
}

bool finite_nonnegative(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

int slot_count(const OptimizerConfig& config) {
  if (config.kind == OptimizerConfig::Kind::kAdam) return 2;
  return config.momentum != 0 ? 1 : 0;
}

void check_optimizer(const OptimizerConfig& c) {
  CHORUS_CHECK_ARG(c.kind == OptimizerConfig::Kind::kSgd || c.kind == OptimizerConfig::Kind::kAdam,
                   "optimizer: unknown kind ", static_cast<int>(c.kind));
  CHORUS_CHECK_ARG(finite_nonnegative(c.learning_rate),
                   "optimizer: learning_rate must be a "
                   "finite number >= 0, got ",
                   c.learning_rate);
  CHORUS_CHECK_ARG(finite_nonnegative(c.weight_decay),
                   "optimizer: weight_decay must be a "
                   "finite number >= 0, got ",
                   c.weight_decay);
  CHORUS_CHECK_ARG(finite_nonnegative(c.momentum),
                   "optimizer: momentum must be a finite "
                   "number >= 0, got ",
                   c.momentum);
  CHORUS_CHECK_ARG(!c.nesterov || c.momentum > 0, "optimizer: nesterov needs momentum > 0");
  CHORUS_CHECK_ARG(
      finite_nonnegative(c.beta1) && c.beta1 < 1 && finite_nonnegative(c.beta2) && c.beta2 < 1,
      "optimizer: Adam betas must be in [0, 1), got (", c.beta1, ", ", c.beta2, ")");
  CHORUS_CHECK_ARG(finite_nonnegative(c.eps), "optimizer: eps must be a finite number >= 0");
}

void apply_update(const OptimizerConfig& config, double learning_rate, const ShardView& shard,
                  const float* grad, int64_t step) {
  if (config.kind == OptimizerConfig::Kind::kAdam) {
    adam(config, learning_rate, shard, grad, step);
  } else {
    sgd(config, learning_rate, shard, grad, step);
  }
}

}  // namespace chorus::ps
