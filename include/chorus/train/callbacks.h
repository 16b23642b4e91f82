// Callbacks: code the trainer calls at the edges of training, epochs and steps (Keras'
// tf.keras.callbacks). Every callback runs on every worker; those that write files write
// them on the chief only (TensorBoard, CSVLogger, ModelCheckpoint's real path,
// BackupAndRestore), so the same program runs unchanged on any number of workers.
//
// Epochs are counted from 0 and steps from 0 inside an epoch, as in Keras; logs are the
// metrics reduced over all replicas of all workers ("loss", "accuracy", "val_loss", ...).
//
// Errors: IoError when a file cannot be written; InvalidArgument for bad options.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/train/model.h"

namespace torch::optim {
class Optimizer;
}

namespace chorus {

class Strategy;
using Logs = std::map<std::string, double>;

// What callbacks see of a running fit() and may change.
struct TrainContext {
  Strategy* strategy = nullptr;
  ReplicatedModel* model = nullptr;
  ::torch::optim::Optimizer* optimizer = nullptr;
  int epochs = 0;                // fit(epochs)
  int64_t steps_per_epoch = -1;  // -1 while unknown (first pass over a finite dataset)
  int epoch = 0;                 // current epoch
  int64_t step = 0;              // steps done in the current epoch
  int64_t global_step = 0;       // steps done since training began (over restarts)
  // Where fit() starts: set by BackupAndRestore::on_train_begin after a restore.
  int initial_epoch = 0;
  int64_t initial_step = 0;
  bool stop_training = false;  // EarlyStopping sets it; fit() stops after the epoch

  double learning_rate() const;       // of the first param group
  void set_learning_rate(double lr);  // every param group
  bool is_chief() const;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(TrainContext&) {}
  virtual void on_train_end(TrainContext&, const Logs&) {}
  virtual void on_epoch_begin(TrainContext&) {}
  virtual void on_epoch_end(TrainContext&, const Logs&) {}
  virtual void on_train_batch_begin(TrainContext&) {}
  // logs: this worker's running epoch means (reduced across workers at epoch end only).
  virtual void on_train_batch_end(TrainContext&, const Logs&) {}
};

// The model, optimizer, RNG and position of a fit() as named byte blobs (the files of a
// checkpoint), and back. Restoring on every worker from the chief's blobs keeps replicas
// identical.
std::map<std::string, std::string> capture_training_state(const TrainContext& ctx);
// Loads what capture_training_state() wrote; sets ctx.initial_epoch/initial_step/
// global_step. InvalidArgument when the blobs do not match the model or optimizer.
void restore_training_state(TrainContext& ctx, const std::map<std::string, std::string>& files);

// Saves the model (and optimizer) at the end of every epoch or every `save_freq_steps`
// steps into CheckpointManager directories under `directory` (<directory>/ckpt-<step>),
// keeping `max_to_keep`. The chief writes the real directory; other workers write the
// same checkpoint to a temporary directory that is removed at once (as Keras does, so
// every worker runs the same code path; it also proves every worker's state serialises).
struct ModelCheckpointOptions {
  int64_t save_freq_steps = 0;  // 0: at every epoch end
  int max_to_keep = 5;
};
std::shared_ptr<Callback> model_checkpoint(std::string directory,
                                           ModelCheckpointOptions options = {});

// Keras' BackupAndRestore: saves the training state to `backup_dir` at every epoch end
// (save_freq_steps == 0) or every save_freq_steps steps; at train begin, restores the
// newest good backup (chief reads it, every worker loads the chief's bytes) so fit()
// resumes at the saved epoch and step with the model, optimizer, RNG and data position
// restored; on a successful end, deletes the backup (delete_checkpoint). Logs
// "BackupAndRestore: saved epoch E step S" and "BackupAndRestore: resuming at epoch E
// step S" on the chief (stdout).
struct BackupAndRestoreOptions {
  int64_t save_freq_steps = 0;
  bool delete_checkpoint = true;
  // Backups kept (>= 1): with two, a newest backup that fails verification (a torn or
  // damaged disk) costs one save interval instead of the whole run.
  int max_to_keep = 2;
};
std::shared_ptr<Callback> backup_and_restore(std::string backup_dir,
                                             BackupAndRestoreOptions options = {});

// TensorBoard event files under log_dir/train and log_dir/validation (chief only):
// "batch_<metric>" every update_freq_steps steps (this worker's running mean) and
// "epoch_<metric>" at every epoch end (all workers), x = global step / epoch.
std::shared_ptr<Callback> tensorboard(std::string log_dir, int64_t update_freq_steps = 0);

// One CSV row per epoch (chief only): epoch,<metrics in name order>; appends when the
// file exists and fit() resumes (append = true), else truncates.
std::shared_ptr<Callback> csv_logger(std::string path, bool append = false);

// Sets the learning rate at every epoch begin to schedule(epoch, current lr).
std::shared_ptr<Callback> learning_rate_scheduler(
    std::function<double(int epoch, double lr)> schedule);

// Goyal et al.'s warmup for large global batches (Horovod's LearningRateWarmupCallback):
// the learning rate ramps linearly per step from target_lr / num_replicas_in_sync to
// target_lr over warmup_epochs (target_lr is usually base_lr x num_replicas_in_sync),
// then is left alone. REQUIRES warmup_epochs > 0 and a known steps_per_epoch.
std::shared_ptr<Callback> learning_rate_warmup(double target_lr, double warmup_epochs);

// Stops fit() when `monitor` (e.g. "val_loss") has not improved by more than min_delta for
// `patience` epochs. mode "min", "max" or "auto" (max for names containing "acc").
struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;
  int patience = 0;
  std::string mode = "auto";
};
std::shared_ptr<Callback> early_stopping(EarlyStoppingOptions options = {});

}  // namespace chorus
