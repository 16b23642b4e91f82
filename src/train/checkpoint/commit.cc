#include "train/checkpoint/commit.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "chorus/error.h"
#include "train/checkpoint/file_io.h"
#include "train/checkpoint/layout.h"
#include "train/checkpoint/manifest.h"
#include "util/log.h"

namespace chorus::ckpt {
namespace {

constexpr int kMaxCreateAttempts = 16;
// Each retry means another process changed the same step in between; more than this many
// in a row is not a race any more.
constexpr int kMaxCommitAttempts = 64;
constexpr unsigned kRenameExchange = 1u << 1;  // RENAME_EXCHANGE of <linux/fs.h>

std::atomic<bool> g_exchange_enabled{true};

// 0, or the errno of renameat2(from, to, RENAME_EXCHANGE).
int rename_exchange(const std::string& from, const std::string& to) {
#ifdef SYS_renameat2
  if (!g_exchange_enabled.load()) return EINVAL;
  long rc = ::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), kRenameExchange);
  return rc == 0 ? 0 : errno;
#else
  (void)from;
  (void)to;
  (void)kRenameExchange;
  return ENOSYS;
#endif
}

bool exchange_unsupported(int err) { return err == EINVAL || err == ENOSYS || err == EOPNOTSUPP; }

// True when `path` still names the directory open as `fd` (nobody removed or replaced it).
bool same_inode(int fd, const std::string& path) {
  struct stat by_fd {};
  struct stat by_path {};
  return ::fstat(fd, &by_fd) == 0 && ::lstat(path.c_str(), &by_path) == 0 &&
         by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

// Removes a temporary directory unless a live save holds its lock.
bool remove_if_abandoned(const std::string& path) {
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return true;  // gone already, or not a directory we made
  // EWOULDBLOCK: its writer lives. Any other failure (no locks on this file system): we
  // cannot tell, so leave it.
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return true;
  if (!same_inode(fd.get(), path)) return true;
  CHORUS_LOG(kInfo, "checkpoint") << "removing '" << path << "' of a save that died";
  return remove_tree(path);
}

// A replaced checkpoint: back into place if its replacement never committed, else away.
bool put_back_or_discard(const std::string& directory, const std::string& prefix,
                         const std::string& path, int64_t step) {
  std::string final_path = join(directory, committed_name(prefix, step));
  if (!is_regular_file(join(final_path, kManifestName)) &&
      ::rename(path.c_str(), final_path.c_str()) == 0) {
    CHORUS_LOG(kWarning, "checkpoint")
        << "put '" << final_path << "' back: the save replacing it died before committing";
    return true;
  }
  return discard(directory, prefix, path);
}

}  // namespace

std::string join(const std::string& directory, const std::string& name) {
  if (!directory.empty() && directory.back() == '/') return directory + name;
  return directory + "/" + name;
}

TempCheckpointDir::TempCheckpointDir(std::string directory, std::string prefix, int64_t step)
    : directory_(std::move(directory)), prefix_(std::move(prefix)), step_(step) {
  for (int attempt = 0; attempt < kMaxCreateAttempts; ++attempt) {
    if (try_create()) return;
  }
  CHORUS_THROW(IoError, "checkpoint: could not create a temporary directory in '", directory_,
               "' after ", kMaxCreateAttempts, " tries (others keep removing them)");
}

bool TempCheckpointDir::try_create() {
  path_ = join(directory_, temp_name(prefix_, step_));
  if (::mkdir(path_.c_str(), 0777) != 0) {
    if (errno == EEXIST) return false;
    throw_io("cannot create", path_, errno);
  }
  fd_ = open_dir(path_, /*missing_ok=*/true);
  if (!fd_.valid()) return false;  // a cleaner removed it before we could lock it
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK || errno == EINTR) return false;  // a cleaner holds it
    // No locks on this file system: cleaners cannot lock it either, so they leave it be.
    CHORUS_LOG(kDebug, "checkpoint") << "no flock() on '" << path_ << "': " << std::strerror(errno);
  }
  return same_inode(fd_.get(), path_);
}

TempCheckpointDir::~TempCheckpointDir() {
  if (!committed_) remove_tree(path_);
}

std::string TempCheckpointDir::commit() {
  const std::string final_path = join(directory_, committed_name(prefix_, step_));
  bool exchange_ok = true;
  std::vector<std::string> replaced;  // old checkpoints of this step moved out of the way
  for (int attempt = 0; !committed_; ++attempt) {
    if (attempt == kMaxCommitAttempts) {
      CHORUS_THROW(IoError, "checkpoint: could not commit '", path_, "' as '", final_path,
                   "': other processes kept replacing it");
    }
    int err = try_commit(final_path, exchange_ok, replaced);
    if (err != 0) {
      if (!replaced.empty()) ::rename(replaced.back().c_str(), final_path.c_str());  // undo
      throw_io("cannot commit '" + path_ + "' as", final_path, err);
    }
  }
  fsync_dir(directory_);  // makes the rename itself durable
  for (const std::string& path : replaced) discard(directory_, prefix_, path);
  return final_path;
}

int TempCheckpointDir::try_commit(const std::string& final_path, bool& exchange_ok,
                                  std::vector<std::string>& replaced) {
  if (::rename(path_.c_str(), final_path.c_str()) == 0) {
    committed_ = true;
    return 0;
  }
  if (errno != EEXIST && errno != ENOTEMPTY) return errno;
  if (exchange_ok && g_exchange_enabled.load()) {
    int err = rename_exchange(path_, final_path);
    if (err == 0) {
      committed_ = true;
      replaced.push_back(path_);  // the temporary name now holds the old checkpoint
      return 0;
    }
    if (err == ENOENT) return 0;  // the old one vanished meanwhile: plain rename next time
    if (!exchange_unsupported(err)) return err;
    exchange_ok = false;
  }
  std::string aside = join(directory_, old_name(prefix_, step_));
  if (::rename(final_path.c_str(), aside.c_str()) == 0) {
    replaced.push_back(aside);
    return 0;
  }
  return errno == ENOENT ? 0 : errno;
}

bool discard(const std::string& directory, const std::string& prefix, const std::string& path) {
  std::string trash = join(directory, deleting_name(prefix));
  if (::rename(path.c_str(), trash.c_str()) != 0) {
    if (errno == ENOENT) return true;
    CHORUS_LOG(kWarning, "checkpoint")
        << "cannot move '" << path << "' out of the way: " << std::strerror(errno);
    return false;
  }
  return remove_tree(trash);
}

bool clean_leftovers(const std::string& directory, const std::string& prefix) {
  bool ok = true;
  for (const std::string& name : list_dir(directory)) {
    auto parsed = parse_name(prefix, name);
    if (!parsed) continue;
    std::string path = join(directory, name);
    switch (parsed->kind) {
      case Kind::kCommitted:
        break;
      case Kind::kTemp:
        ok = remove_if_abandoned(path) && ok;
        break;
      case Kind::kOld:
        ok = put_back_or_discard(directory, prefix, path, parsed->step) && ok;
        break;
      case Kind::kDeleting:
        ok = remove_tree(path) && ok;
        break;
    }
  }
  return ok;
}

void set_rename_exchange_enabled(bool enabled) { g_exchange_enabled.store(enabled); }

}  // namespace chorus::ckpt
