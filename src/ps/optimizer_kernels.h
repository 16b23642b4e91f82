// The element-wise updates a ps applies to one shard, in float32 with torch::optim's order
// of operations (include/chorus/ps/optimizer.h). Hyperparameters are rounded to float once,
// as torch does when it passes a double scalar to a float tensor op.
#pragma once

#include <cstdint>

#include "chorus/ps/optimizer.h"

namespace chorus::ps {

// Slot arrays the optimizer keeps per element: SGD with momentum 1 (the momentum buffer),
// SGD without 0, Adam 2 (exp_avg, exp_avg_sq).
int slot_count(const OptimizerConfig& config);

// Throws InvalidArgument naming the field when the configuration is not usable
// (negative or non-finite rates, nesterov without momentum, betas outside [0, 1)).
void check_optimizer(const OptimizerConfig& config);

struct ShardView {
  float* values = nullptr;
  float* slot0 = nullptr;  // momentum buffer, or Adam's exp_avg
  float* slot1 = nullptr;  // Adam's exp_avg_sq
  int64_t length = 0;
};

// One update of a shard with gradient `grad` (length floats). `step` is the shard's step
// count including this update (1 on the first), as torch counts it.
void apply_update(const OptimizerConfig& config, double learning_rate, const ShardView& shard,
                  const float* grad, int64_t step);

}  // namespace chorus::ps
