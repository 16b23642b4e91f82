// The strategy-specific half of GradientUpdater: how the replicas' gradients become one
// update (summed in memory, allreduced across workers, or pushed to parameter servers).
#pragma once

#include <torch/optim/optimizer.h>

namespace chorus {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual void apply() = 0;
  virtual void zero_grad() = 0;
  virtual ::torch::optim::Optimizer& optimizer() = 0;
};

}  // namespace chorus
