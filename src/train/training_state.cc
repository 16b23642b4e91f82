// The state of a fit() as checkpoint files: "model", "optimizer" (torch::serialize
// archives), "rng" (the CPU generator's state) and "progress" (where to resume).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <mutex>
#include <sstream>

#include "chorus/error.h"
#include "chorus/train/callbacks.h"
#include "chorus/train/strategy.h"

namespace chorus {

double TrainContext::learning_rate() const {
  CHORUS_CHECK_ARG(optimizer && !optimizer->param_groups().empty(),
                   "TrainContext: no optimizer with a parameter group");
  return optimizer->param_groups()[0].options().get_lr();
}

void TrainContext::set_learning_rate(double lr) {
  CHORUS_CHECK_ARG(optimizer, "TrainContext: no optimizer");
  CHORUS_CHECK_ARG(lr >= 0, "learning rate must be >= 0, got ", lr);
  for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
}

bool TrainContext::is_chief() const { return strategy == nullptr || strategy->is_chief(); }

namespace {

std::string archive_bytes(const std::function<void(::torch::serialize::OutputArchive&)>& fill) {
  ::torch::serialize::OutputArchive archive;
  fill(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_archive(const std::string& bytes, const char* what,
                  const std::function<void(::torch::serialize::InputArchive&)>& use) {
  ::torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  try {
    archive.load_from(in);
    use(archive);
  } catch (const c10::Error& e) {
    CHORUS_THROW(InvalidArgument, "checkpoint: the ", what,
                 " does not match this program's: ", e.what_without_backtrace());
  }
}

const std::string& file_of(const std::map<std::string, std::string>& files,
                           const std::string& name) {
  auto it = files.find(name);
  CHORUS_CHECK_ARG(it != files.end(), "checkpoint: no '", name, "' file");
  return it->second;
}

}  // namespace

std::map<std::string, std::string> capture_training_state(const TrainContext& ctx) {
  CHORUS_CHECK_ARG(ctx.model && ctx.optimizer, "capture_training_state: no model or optimizer");
  std::map<std::string, std::string> files;
  // First: a strategy holding the variables elsewhere brings the model up to date.
  if (ctx.strategy) ctx.strategy->save_variables(*ctx.model, files);
  files["model"] = archive_bytes([&](auto& a) { ctx.model->module().save(a); });
  files["optimizer"] = archive_bytes([&](auto& a) { ctx.optimizer->save(a); });
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor state = gen.get_state();
    files["rng"] =
        std::string(static_cast<const char*>(state.data_ptr()), static_cast<size_t>(state.numel()));
  }
  // The position to resume at: the next step to run.
  int epoch = ctx.epoch;
  int64_t step = ctx.step;
  if (ctx.steps_per_epoch > 0 && step >= ctx.steps_per_epoch) {
    ++epoch;
    step = 0;
  }
  std::ostringstream progress;
  progress << "epoch " << epoch << "\nstep " << step << "\nglobal_step " << ctx.global_step << "\n";
  files["progress"] = progress.str();
  return files;
}

void restore_training_state(TrainContext& ctx, const std::map<std::string, std::string>& files) {
  CHORUS_CHECK_ARG(ctx.model && ctx.optimizer, "restore_training_state: no model or optimizer");
  load_archive(file_of(files, "model"), "model", [&](auto& a) { ctx.model->module().load(a); });
  load_archive(file_of(files, "optimizer"), "optimizer state",
               [&](auto& a) { ctx.optimizer->load(a); });
  ctx.model->sync_replicas();
  if (ctx.strategy) ctx.strategy->restore_variables(*ctx.model, files);
  {
    const std::string& rng = file_of(files, "rng");
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor state = at::empty({static_cast<int64_t>(rng.size())}, at::kByte);
    std::memcpy(state.data_ptr(), rng.data(), rng.size());
    try {
      gen.set_state(state);
    } catch (const c10::Error& e) {
      CHORUS_THROW(InvalidArgument, "checkpoint: bad RNG state: ", e.what_without_backtrace());
    }
  }
  std::istringstream in(file_of(files, "progress"));
  std::string k1, k2, k3;
  int epoch = -1;
  int64_t step = -1, global_step = -1;
  in >> k1 >> epoch >> k2 >> step >> k3 >> global_step;
  CHORUS_CHECK_ARG(in && k1 == "epoch" && k2 == "step" && k3 == "global_step" && epoch >= 0 &&
                       step >= 0 && global_step >= 0,
                   "checkpoint: malformed 'progress' file");
  ctx.initial_epoch = epoch;
  ctx.initial_step = step;
  ctx.global_step = global_step;
}

}  // namespace chorus
