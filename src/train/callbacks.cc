// The callbacks of callbacks.h. Model state goes through capture_training_state /
// restore_training_state (training_state.cc).
#include "chorus/train/callbacks.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "chorus/error.h"
#include "chorus/train/checkpoint.h"
#include "chorus/train/strategy.h"
#include "chorus/train/tfevents.h"
#include "util/byte_order.h"

namespace chorus {
namespace {

// ---- one blob for the chief's checkpoint files (broadcast to every worker) --------------

std::string get_bytes(byte_order::ByteReader& in) {
  uint64_t n = in.u64();
  if (n > in.left()) in.fail("truncated (", n, " bytes announced, ", in.left(), " left)");
  return std::string(in.bytes(n));
}

std::string pack(const std::map<std::string, std::string>& files) {
  std::string out;
  for (const auto& [name, bytes] : files) {
    byte_order::put_u64(out, name.size());
    out += name;
    byte_order::put_u64(out, bytes.size());
    out += bytes;
  }
  return out;
}

std::map<std::string, std::string> unpack(const std::string& blob) {
  std::map<std::string, std::string> files;
  byte_order::ByteReader in(blob, "checkpoint blob");
  while (!in.at_end()) {
    std::string name = get_bytes(in);
    files[name] = get_bytes(in);
  }
  return files;
}

// Saves the state: the chief into `manager`, other workers into a temporary directory
// removed at once (see ModelCheckpoint in callbacks.h).
void save_everywhere(TrainContext& ctx, CheckpointManager* chief_manager, int64_t step) {
  auto files = capture_training_state(ctx);
  if (ctx.is_chief()) {
    chief_manager->save(step, files);
    return;
  }
  char dir[] = "/tmp/chorus-ckpt-XXXXXX";
  if (!mkdtemp(dir)) CHORUS_THROW(IoError, "cannot create a temporary checkpoint directory");
  CheckpointManager scratch(dir, CheckpointOptions{1, "ckpt", {}});
  scratch.save(step, files);
  scratch.remove_all();
  ::rmdir(dir);
}

class ModelCheckpoint : public Callback {
 public:
  ModelCheckpoint(std::string dir, ModelCheckpointOptions o) : dir_(std::move(dir)), options_(o) {
    CHORUS_CHECK_ARG(o.save_freq_steps >= 0, "model_checkpoint: save_freq_steps must be >= 0");
  }
  // Early, so that a directory that cannot be used fails before training.
  void on_train_begin(TrainContext& ctx) override {
    if (ctx.is_chief()) manager();
  }
  void on_train_batch_end(TrainContext& ctx, const Logs&) override {
    if (options_.save_freq_steps > 0 && ctx.global_step % options_.save_freq_steps == 0) save(ctx);
  }
  void on_epoch_end(TrainContext& ctx, const Logs&) override {
    if (options_.save_freq_steps == 0) save(ctx);
  }

 private:
  void save(TrainContext& ctx) {
    save_everywhere(ctx, ctx.is_chief() ? &manager() : nullptr, ctx.global_step);
  }
  // The chief's; made when first needed: in an elastic job a worker can become the chief
  // mid-fit.
  CheckpointManager& manager() {
    if (!manager_) {
      CheckpointOptions co;
      co.max_to_keep = options_.max_to_keep;
      manager_ = std::make_unique<CheckpointManager>(dir_, co);
    }
    return *manager_;
  }
  std::string dir_;
  ModelCheckpointOptions options_;
  std::unique_ptr<CheckpointManager> manager_;
};

class BackupAndRestore : public Callback {
 public:
  BackupAndRestore(std::string dir, BackupAndRestoreOptions o) : dir_(std::move(dir)), options_(o) {
    CHORUS_CHECK_ARG(o.save_freq_steps >= 0, "backup_and_restore: save_freq_steps must be >= 0");
    CHORUS_CHECK_ARG(o.max_to_keep >= 1, "backup_and_restore: max_to_keep must be >= 1, got ",
                     o.max_to_keep);
  }

  void on_train_begin(TrainContext& ctx) override {
    std::string blob;
    if (ctx.is_chief()) {
      if (auto latest = manager().restore_latest()) blob = pack(latest->files);
    }
    ctx.strategy->broadcast_from_chief(blob);
    if (blob.empty()) return;
    restore_training_state(ctx, unpack(blob));
    if (ctx.is_chief()) {
      std::printf("BackupAndRestore: resuming at epoch %d step %lld from %s\n", ctx.initial_epoch,
                  static_cast<long long>(ctx.initial_step), dir_.c_str());
      std::fflush(stdout);
    }
  }

  void on_train_batch_end(TrainContext& ctx, const Logs&) override {
    if (options_.save_freq_steps == 0 || ctx.global_step % options_.save_freq_steps != 0) return;
    // The epoch's last step is saved by on_epoch_end, after validation.
    if (ctx.steps_per_epoch > 0 && ctx.step >= ctx.steps_per_epoch) return;
    save(ctx);
  }

  void on_epoch_end(TrainContext& ctx, const Logs&) override { save(ctx); }

  void on_train_end(TrainContext& ctx, const Logs&) override {
    if (!options_.delete_checkpoint) return;
    ctx.strategy->barrier();  // nobody may still need the backup
    if (manager_) manager_->remove_all();
  }

 private:
  void save(TrainContext& ctx) {
    if (!ctx.is_chief()) return;  // replicas are identical: the chief's copy is the backup
    auto files = capture_training_state(ctx);
    manager().save(ctx.global_step, files);
    std::printf("BackupAndRestore: saved epoch %d step %lld (global step %lld)\n", ctx.epoch,
                static_cast<long long>(ctx.step), static_cast<long long>(ctx.global_step));
    std::fflush(stdout);
  }
  // The chief's; made when first needed, as ModelCheckpoint's.
  CheckpointManager& manager() {
    if (!manager_) {
      manager_ = std::make_unique<CheckpointManager>(
          dir_, CheckpointOptions{options_.max_to_keep, "backup", {}});
    }
    return *manager_;
  }
  std::string dir_;
  BackupAndRestoreOptions options_;
  std::unique_ptr<CheckpointManager> manager_;
};

class TensorBoard : public Callback {
 public:
  TensorBoard(std::string dir, int64_t freq) : dir_(std::move(dir)), freq_(freq) {
    CHORUS_CHECK_ARG(freq >= 0, "tensorboard: update_freq_steps must be >= 0");
  }
  void on_train_begin(TrainContext& ctx) override {
    if (!ctx.is_chief()) return;
    train_ = std::make_unique<EventWriter>(dir_ + "/train");
    validation_ = std::make_unique<EventWriter>(dir_ + "/validation");
  }
  void on_train_batch_end(TrainContext& ctx, const Logs& logs) override {
    if (!train_ || freq_ == 0 || ctx.global_step % freq_ != 0) return;
    for (const auto& [k, v] : logs)
      train_->add_scalar("batch_" + k, static_cast<float>(v), ctx.global_step);
  }
  void on_epoch_end(TrainContext& ctx, const Logs& logs) override {
    if (!train_) return;
    for (const auto& [k, v] : logs) {
      const bool val = k.rfind("val_", 0) == 0;
      (val ? *validation_ : *train_)
          .add_scalar("epoch_" + (val ? k.substr(4) : k), static_cast<float>(v), ctx.epoch);
    }
    train_->flush();
    validation_->flush();
  }
  void on_train_end(TrainContext&, const Logs&) override {
    if (train_) train_->flush();
    if (validation_) validation_->flush();
  }

 private:
  std::string dir_;
  int64_t freq_;
  std::unique_ptr<EventWriter> train_, validation_;
};

class CsvLogger : public Callback {
 public:
  CsvLogger(std::string path, bool append) : path_(std::move(path)), append_(append) {}
  void on_train_begin(TrainContext& ctx) override {
    if (!ctx.is_chief()) return;
    struct stat st;
    header_written_ = append_ && ::stat(path_.c_str(), &st) == 0 && st.st_size > 0;
    out_.open(path_, append_ ? std::ios::app : std::ios::trunc);
    if (!out_) CHORUS_THROW(IoError, "csv_logger: cannot open ", path_);
  }
  void on_epoch_end(TrainContext& ctx, const Logs& logs) override {
    if (!out_.is_open()) return;
    if (!header_written_) {
      out_ << "epoch";
      for (const auto& kv : logs) out_ << ',' << kv.first;
      out_ << '\n';
      header_written_ = true;
    }
    out_ << ctx.epoch;
    out_.precision(std::numeric_limits<double>::max_digits10);
    for (const auto& kv : logs) out_ << ',' << kv.second;
    out_ << '\n';
    out_.flush();
    if (!out_) CHORUS_THROW(IoError, "csv_logger: cannot write ", path_);
  }

 private:
  std::string path_;
  bool append_;
  bool header_written_ = false;
  std::ofstream out_;
};

class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(std::function<double(int, double)> f) : f_(std::move(f)) {
    CHORUS_CHECK_ARG(static_cast<bool>(f_), "learning_rate_scheduler: no schedule");
  }
  void on_epoch_begin(TrainContext& ctx) override {
    ctx.set_learning_rate(f_(ctx.epoch, ctx.learning_rate()));
  }

 private:
  std::function<double(int, double)> f_;
};

class LearningRateWarmup : public Callback {
 public:
  LearningRateWarmup(double target, double epochs) : target_(target), epochs_(epochs) {
    CHORUS_CHECK_ARG(target > 0 && epochs > 0,
                     "learning_rate_warmup: target_lr and warmup_epochs must be > 0");
  }
  void on_train_begin(TrainContext& ctx) override {
    CHORUS_CHECK_ARG(
        ctx.steps_per_epoch > 0,
        "learning_rate_warmup: needs a known number of steps per epoch (pass steps_per_epoch)");
  }
  void on_train_batch_begin(TrainContext& ctx) override {
    if (done_) return;
    const double progress = (static_cast<double>(ctx.epoch * ctx.steps_per_epoch + ctx.step)) /
                            (epochs_ * static_cast<double>(ctx.steps_per_epoch));
    const double start = target_ / ctx.strategy->num_replicas_in_sync();
    if (progress >= 1.0) {
      ctx.set_learning_rate(target_);
      done_ = true;
      return;
    }
    ctx.set_learning_rate(start + (target_ - start) * progress);
  }

 private:
  double target_, epochs_;
  bool done_ = false;
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions o) : o_(std::move(o)) {
    CHORUS_CHECK_ARG(o_.mode == "min" || o_.mode == "max" || o_.mode == "auto",
                     "early_stopping: mode must be min, max or auto, got '", o_.mode, "'");
    CHORUS_CHECK_ARG(o_.patience >= 0 && o_.min_delta >= 0,
                     "early_stopping: patience and min_delta must be >= 0");
    maximize_ =
        o_.mode == "max" || (o_.mode == "auto" && o_.monitor.find("acc") != std::string::npos);
  }
  void on_epoch_end(TrainContext& ctx, const Logs& logs) override {
    auto it = logs.find(o_.monitor);
    CHORUS_CHECK_ARG(it != logs.end(), "early_stopping: no metric '", o_.monitor, "' in the logs");
    const double v = maximize_ ? it->second : -it->second;
    if (!seen_ || v > best_ + o_.min_delta) {
      best_ = v;
      seen_ = true;
      wait_ = 0;
      return;
    }
    if (++wait_ >= o_.patience) ctx.stop_training = true;
  }

 private:
  EarlyStoppingOptions o_;
  bool maximize_ = false;
  bool seen_ = false;
  double best_ = 0;
  int wait_ = 0;
};

}  // namespace

std::shared_ptr<Callback> model_checkpoint(std::string directory, ModelCheckpointOptions options) {
  return std::make_shared<ModelCheckpoint>(std::move(directory), options);
}
std::shared_ptr<Callback> backup_and_restore(std::string backup_dir,
                                             BackupAndRestoreOptions options) {
  return std::make_shared<BackupAndRestore>(std::move(backup_dir), options);
}
std::shared_ptr<Callback> tensorboard(std::string log_dir, int64_t update_freq_steps) {
  return std::make_shared<TensorBoard>(std::move(log_dir), update_freq_steps);
}
std::shared_ptr<Callback> csv_logger(std::string path, bool append) {
  return std::make_shared<CsvLogger>(std::move(path), append);
}
std::shared_ptr<Callback> learning_rate_scheduler(std::function<double(int, double)> schedule) {
  return std::make_shared<LearningRateScheduler>(std::move(schedule));
}
std::shared_ptr<Callback> learning_rate_warmup(double target_lr, double warmup_epochs) {
  return std::make_shared<LearningRateWarmup>(target_lr, warmup_epochs);
}
std::shared_ptr<Callback> early_stopping(EarlyStoppingOptions options) {
  return std::make_shared<EarlyStopping>(std::move(options));
}

}  // namespace chorus
