// The commit protocol of a checkpoint directory and the cleanup of what dead saves leave.
//
// Liveness: a save holds flock(LOCK_EX) on its temporary directory from creation to
// commit. The kernel drops the lock when the process dies (SIGKILL included), so a cleaner
// that can take the lock knows the writer is gone; pids are in names for people only (they
// are reused, and mean nothing on another host of a shared file system).
//
// Replacing a committed step: renameat2(RENAME_EXCHANGE) swaps the new directory in
// atomically. Where the file system lacks it (NFS, older kernels), the old one is renamed
// aside to .<prefix>-old-... first; a crash between the two renames leaves no committed
// checkpoint of that step, and the next cleaner renames the old one back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/net.h"

namespace chorus::ckpt {

std::string join(const std::string& directory, const std::string& name);

// A temporary checkpoint directory being written. Removed on destruction unless committed.
class TempCheckpointDir {
 public:
  // Creates and locks .<prefix>-tmp-<step>-<pid>-<hex> in `directory` (retrying with a new
  // name if a cleaner removes it before the lock is taken). Throws IoError.
  TempCheckpointDir(std::string directory, std::string prefix, int64_t step);
  ~TempCheckpointDir();
  TempCheckpointDir(const TempCheckpointDir&) = delete;
  TempCheckpointDir& operator=(const TempCheckpointDir&) = delete;

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

  // Renames it to <directory>/<prefix>-<step>, replacing a committed one of that step,
  // fsyncs `directory`, then removes what was replaced. Returns the committed path.
  // REQUIRES: every file and the directory itself already fsynced.
  std::string commit();

 private:
  std::string directory_;
  std::string prefix_;
  int64_t step_;
  std::string path_;
  net::Fd fd_;
  bool committed_ = false;

  // One attempt at locking a fresh name; false when a cleaner got in the way.
  bool try_create();
  // One attempt at the rename; 0 when committed or when another attempt is due (another
  // process changed the step meanwhile), else the errno of a real failure.
  int try_commit(const std::string& final_path, bool& exchange_ok,
                 std::vector<std::string>& replaced);
};

// Renames `path` to a .<prefix>-del-... name (so it leaves the committed namespace in one
// step), then removes it. True when gone (or already gone); false with a warning logged.
bool discard(const std::string& directory, const std::string& prefix, const std::string& path);

// Removes temporary directories no live process holds and half-deleted ones; renames a
// replaced checkpoint back when its replacement never committed, else removes it.
// Returns false (warnings logged) when something could not be removed.
bool clean_leftovers(const std::string& directory, const std::string& prefix);

// Test seam: false makes commit() take the rename-aside path, as on file systems without
// RENAME_EXCHANGE. Process-wide.
void set_rename_exchange_enabled(bool enabled);

}  // namespace chorus::ckpt
