// Checkpoint directories that survive crashes, without libtorch. The trainer serialises
// model, optimizer, RNG and progress into named byte blobs; CheckpointManager makes them
// durable and hands them back verified. docs/checkpoints.md specifies the layout on disk.
//
// On disk, under `directory`:
//   <prefix>-<step>/MANIFEST          names, sizes, SHA-256 of each file, step, format
//                                     version, and a SHA-256 of the manifest itself
//   <prefix>-<step>/<name>            one file per blob
//   .<prefix>-tmp-<step>-<pid>-<hex>  a save in progress (or one that crashed)
//   .<prefix>-old-<step>-<pid>-<hex>  a replaced checkpoint on its way out
//   .<prefix>-del-<pid>-<hex>         a checkpoint being deleted (max_to_keep)
// A checkpoint is committed when its directory has its final name: save() builds it under
// a temporary name and rename()s it into place, so a crash at any point leaves either the
// complete checkpoint or none, never a half-written one under a committed name.
//
// Errors: IoError for file-system failures (the message names the path and strerror);
// InvalidArgument for bad arguments (negative step, bad names) and for corrupt data (the
// message names the checkpoint, the file and what differs).
//
// Thread safety: save() and remove_all() of one object from one thread at a time. Any
// number of managers, in this process or others, may save into the same directory at the
// same time: temporary names are unique and the rename is the commit. The const methods
// may run concurrently with anything, including saves and deletions by other processes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

struct CheckpointOptions {
  // After a save, committed checkpoints beyond this many are deleted, lowest steps first;
  // the one just saved is always kept. 0 keeps all. REQUIRES: >= 0.
  int max_to_keep = 5;
  // Directories are <directory>/<prefix>-<step>. REQUIRES: [A-Za-z0-9._-]+, not starting
  // with '.', at most 100 characters.
  std::string prefix = "ckpt";
  // Test seam: called after every file and the manifest are written and fsynced, before
  // the rename that commits the checkpoint (tests kill the process here). If it throws,
  // the temporary directory is removed and save() rethrows.
  std::function<void(const std::string& temp_dir)> before_commit;
};

struct CheckpointInfo {
  int64_t step;
  std::string path;
};

struct Checkpoint {
  int64_t step;
  std::string path;
  std::map<std::string, std::string> files;  // name -> bytes, checksums verified
};

class CheckpointManager {
 public:
  // Creates `directory` (with parents). Removes what saves that died left behind:
  // temporary directories no live process holds (each save holds an flock() on its
  // temporary directory until it commits), replaced and half-deleted checkpoints.
  // Throws InvalidArgument for bad options, IoError when the directory cannot be made.
  explicit CheckpointManager(std::string directory, CheckpointOptions options = {});

  // Atomically writes <directory>/<prefix>-<step>/ holding `files` and a MANIFEST:
  // temporary directory, write + fsync each file and the manifest, fsync the temporary
  // directory, before_commit, rename, fsync `directory`. A committed checkpoint of the same
  // step is replaced atomically (renameat2 RENAME_EXCHANGE where the file system has it,
  // else rename the old one aside first). Then enforces max_to_keep. Returns the path.
  // REQUIRES: step >= 0; names match [A-Za-z0-9._-]+, at most 255 characters, not ".",
  // "..", or "MANIFEST" (InvalidArgument otherwise, before anything is written).
  std::string save(int64_t step, const std::map<std::string, std::string>& files);

  // Committed checkpoints (a MANIFEST present), ascending step; not verified.
  std::vector<CheckpointInfo> list() const;
  std::optional<CheckpointInfo> latest() const;

  // The newest checkpoint whose manifest and files verify. A newer one that is corrupt,
  // truncated or unreadable is skipped with a warning (CHORUS_LOG tag "checkpoint") that
  // names it and what is wrong. nullopt when none verifies or none exists.
  std::optional<Checkpoint> restore_latest() const;

  // The checkpoint of `step`, verified. InvalidArgument when it is missing or corrupt
  // (naming the file and what differs); IoError when a file cannot be read.
  Checkpoint restore(int64_t step) const;

  // Blocks until a checkpoint with step > after_step is committed and returns the latest
  // one, or nullopt after `timeout`. Polls with sleeps growing from 5 ms to 100 ms (no busy
  // spin). For a side evaluator watching a training job's directory.
  std::optional<CheckpointInfo> wait_for_newer(int64_t after_step,
                                               std::chrono::milliseconds timeout) const;

  // Deletes every committed checkpoint of this prefix and every temporary directory no
  // live save holds (one still being written by a live process is left to it), then
  // `directory` itself if it is empty (BackupAndRestore's delete on success).
  void remove_all();

  const std::string& directory() const { return directory_; }
  const CheckpointOptions& options() const { return options_; }

 private:
  std::string directory_;
  CheckpointOptions options_;

  std::string path_of(int64_t step) const;
  Checkpoint load(const CheckpointInfo& info) const;
  void enforce_max_to_keep(int64_t just_saved);
  void delete_checkpoint(const CheckpointInfo& info);
};

// Writes `bytes` to `path` atomically: a temporary file in the same directory, write,
// fsync, rename over `path`, fsync the directory. Readers and crashes see the old content
// or the new, never a mix. A crash may leave a ".<name>.tmp-<pid>-<hex>" file behind.
// Throws IoError (path and strerror).
void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole content of `path`. Throws IoError when it is missing or unreadable.
std::string read_file(const std::string& path);

}  // namespace chorus
