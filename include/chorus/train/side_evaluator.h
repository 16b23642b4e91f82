// A side evaluator (tf.distribute's "sidecar evaluation"): a separate process that
// watches the directory ModelCheckpoint writes, evaluates every new checkpoint on the
// validation data as soon as it is committed, and logs its own TensorBoard scalars —
// evaluation runs beside training instead of pausing it.
//
//   run_side_evaluator(trainer, model, validation, {.checkpoint_dir = "ckpt",
//                                                   .log_dir = "logs"});
//
// Thread safety: one thread; the trainer's strategy should be a DefaultStrategy.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "chorus/train/trainer.h"

namespace chorus {

struct SideEvaluatorOptions {
  std::string checkpoint_dir;  // ModelCheckpoint's directory
  std::string log_dir;         // scalars "eval_<metric>" under log_dir/eval, x = checkpoint step
  // Stop when no new checkpoint arrives for this long ...
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // ... or after evaluating a checkpoint whose step is >= this (-1: no such limit).
  int64_t last_step = -1;
  int64_t steps = -1;  // evaluation steps per checkpoint; -1: the whole dataset
};

// Evaluates checkpoints in step order (a checkpoint superseded while another was being
// evaluated is skipped: the newest is what matters). Returns (step, logs) per evaluation.
// A checkpoint that fails verification is skipped with a warning.
std::vector<std::pair<int64_t, Logs>> run_side_evaluator(Trainer& trainer, ReplicatedModel& model,
                                                         const Dataset& data,
                                                         const SideEvaluatorOptions& options);

}  // namespace chorus
