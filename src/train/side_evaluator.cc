#include "chorus/train/side_evaluator.h"

#include <torch/serialize/input-archive.h>

#include <sstream>

#include "chorus/error.h"
#include "chorus/train/checkpoint.h"
#include "chorus/train/tfevents.h"
#include "util/log.h"

namespace chorus {
namespace {

void load_model(ReplicatedModel& model, const Checkpoint& checkpoint) {
  auto it = checkpoint.files.find("model");
  CHORUS_CHECK_ARG(it != checkpoint.files.end(), "checkpoint ", checkpoint.path,
                   " has no 'model' file");
  ::torch::serialize::InputArchive archive;
  std::istringstream in(it->second);
  try {
    archive.load_from(in);
    model.module().load(archive);
  } catch (const c10::Error& e) {
    CHORUS_THROW(InvalidArgument, "checkpoint ", checkpoint.path,
                 ": the model does not match: ", e.what_without_backtrace());
  }
  model.sync_replicas();
}

}  // namespace

std::vector<std::pair<int64_t, Logs>> run_side_evaluator(Trainer& trainer, ReplicatedModel& model,
                                                         const Dataset& data,
                                                         const SideEvaluatorOptions& options) {
  CHORUS_CHECK_ARG(!options.checkpoint_dir.empty(), "side evaluator: no checkpoint_dir");
  CheckpointManager manager(options.checkpoint_dir, CheckpointOptions{0, "ckpt", {}});
  EventWriter events(options.log_dir.empty() ? options.checkpoint_dir + "/eval"
                                             : options.log_dir + "/eval");
  std::vector<std::pair<int64_t, Logs>> results;
  int64_t done = -1;
  while (options.last_step < 0 || done < options.last_step) {
    auto next = manager.wait_for_newer(done, options.idle_timeout);
    if (!next) break;
    auto newest = manager.latest();
    const int64_t step = newest ? newest->step : next->step;
    done = step;
    Checkpoint checkpoint;
    try {
      checkpoint = manager.restore(step);
    } catch (const InvalidArgument& e) {
      CHORUS_LOG(kWarning, "side-evaluator")
          << "skipping checkpoint at step " << step << ": " << e.what();
      continue;
    }
    load_model(model, checkpoint);
    Logs logs = trainer.evaluate(data, options.steps);
    for (const auto& [k, v] : logs) events.add_scalar("eval_" + k, static_cast<float>(v), step);
    events.flush();
    results.emplace_back(step, logs);
  }
  return results;
}

}  // namespace chorus
