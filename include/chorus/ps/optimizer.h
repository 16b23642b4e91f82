// The optimizer a parameter server applies to its shards, with its slot state kept there.
// The arithmetic is torch::optim's, element for element (float32), so one worker training
// asynchronously through a ps follows the same trajectory as the torch optimizer locally:
//   kSgd       p -= lr * (g + wd p), with momentum m (torch's buffer: b = m b + g on every
//              step after the first, b = g on the first; nesterov: g + m b)
//   kAdam      torch::optim::Adam (bias-corrected, eps outside the sqrt, L2 weight decay
//              added to the gradient; no amsgrad)
#pragma once

#include <cstdint>

namespace chorus::ps {

struct OptimizerConfig {
  enum class Kind : uint8_t { kSgd = 0, kAdam = 1 };
  Kind kind = Kind::kSgd;
  double learning_rate = 0.01;
  double momentum = 0;    // kSgd
  bool nesterov = false;  // kSgd, REQUIRES momentum > 0
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // kAdam
};

// How pushes become updates.
enum class UpdateMode : uint8_t {
  kAsync = 0,  // every push is applied on arrival (Hogwild-style per shard, under its lock)
  kSync = 1,   // pushes tagged with the ps version are summed; after num_workers of them
               // the mean is applied once and the version advances
  kBoundedStaleness = 2,  // applied on arrival; the coordinator keeps every worker at most
                          // `max_staleness` steps ahead of the slowest live worker
};

}  // namespace chorus::ps
