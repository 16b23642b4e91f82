// CheckpointManager: saving through TempCheckpointDir (commit.h), listing by name, and
// restoring with every byte checked against the manifest before it is returned.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <thread>

#include "chorus/error.h"
#include "chorus/train/checkpoint.h"
#include "train/checkpoint/commit.h"
#include "train/checkpoint/file_io.h"
#include "train/checkpoint/layout.h"
#include "train/checkpoint/manifest.h"
#include "util/deadline.h"
#include "util/log.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kFirstPollSleep(5);
constexpr milliseconds kMaxPollSleep(100);

void check_names(const std::map<std::string, std::string>& files) {
  CHORUS_CHECK_ARG(files.size() <= ckpt::kMaxFiles, "checkpoint: ", files.size(),
                   " files, at most ", ckpt::kMaxFiles, " allowed");
  for (const auto& [name, bytes] : files) {
    CHORUS_CHECK_ARG(ckpt::valid_file_name(name), "checkpoint: bad file name '", name,
                     "': use [A-Za-z0-9._-]+, at most ", ckpt::kMaxNameBytes,
                     " characters, not '.', '..' or '", ckpt::kManifestName, "'");
  }
}

// Creates `directory` and its parents; fsyncs the parent of a new one so it stays.
void make_directory(const std::string& directory) {
  std::error_code ec;
  bool created = std::filesystem::create_directories(directory, ec);
  if (ec) {
    CHORUS_THROW(IoError, "checkpoint: cannot create directory '", directory, "': ", ec.message());
  }
  if (!std::filesystem::is_directory(directory, ec)) {
    CHORUS_THROW(IoError, "checkpoint: '", directory, "' is not a directory");
  }
  if (created) {
    std::string parent = std::filesystem::path(directory).parent_path().string();
    ckpt::fsync_dir(parent.empty() ? "." : parent);
  }
}

// Opens a member of a checkpoint directory for reading; InvalidArgument when it is not
// there or not a regular file (a symlink is not followed).
net::Fd open_member(int dir_fd, const std::string& name, const std::string& where,
                    struct stat& st) {
  net::Fd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      CHORUS_THROW(InvalidArgument, "checkpoint '", where, "': file '", name, "' is missing");
    }
    if (errno == ELOOP) {
      CHORUS_THROW(InvalidArgument, "checkpoint '", where, "': file '", name, "' is a symlink");
    }
    ckpt::throw_io("cannot open", ckpt::join(where, name), errno);
  }
  if (::fstat(fd.get(), &st) != 0) ckpt::throw_io("cannot stat", ckpt::join(where, name), errno);
  if (!S_ISREG(st.st_mode)) {
    CHORUS_THROW(InvalidArgument, "checkpoint '", where, "': '", name, "' is not a regular file");
  }
  return fd;
}

std::string read_manifest(int dir_fd, const std::string& where) {
  struct stat st {};
  net::Fd fd = open_member(dir_fd, ckpt::kManifestName, where, st);
  if (static_cast<uint64_t>(st.st_size) > ckpt::kMaxManifestBytes) {
    CHORUS_THROW(InvalidArgument, "checkpoint '", where, "': MANIFEST is corrupt: ", st.st_size,
                 " bytes, more than the ", ckpt::kMaxManifestBytes, " allowed");
  }
  return ckpt::read_fd(fd.get(), static_cast<size_t>(st.st_size), ckpt::join(where, "MANIFEST"));
}

// The bytes of one file, after its size and SHA-256 matched the manifest.
std::string read_verified(int dir_fd, const ckpt::FileEntry& entry, const std::string& where) {
  struct stat st {};
  net::Fd fd = open_member(dir_fd, entry.name, where, st);
  auto fail = [&](const auto&... what) {
    CHORUS_THROW(InvalidArgument, "checkpoint '", where, "': file '", entry.name, "' ", what...);
  };
  // Checked before reading, so a file that grew huge is not read into memory.
  if (static_cast<uint64_t>(st.st_size) != entry.size) {
    fail("has ", st.st_size, " bytes, the manifest says ", entry.size,
         " (truncated or overwritten)");
  }
  std::string bytes = ckpt::read_fd(fd.get(), entry.size, ckpt::join(where, entry.name));
  if (bytes.size() != entry.size) fail("shrank to ", bytes.size(), " bytes while being read");
  std::string actual = ckpt::sha256_hex(bytes);
  if (actual != entry.sha256_hex) {
    fail("is corrupt: its SHA-256 is ", actual, ", the manifest says ", entry.sha256_hex);
  }
  return bytes;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string directory, CheckpointOptions options)
    : directory_(std::move(directory)), options_(std::move(options)) {
  CHORUS_CHECK_ARG(!directory_.empty(), "checkpoint: the directory is empty");
  CHORUS_CHECK_ARG(options_.max_to_keep >= 0, "checkpoint: max_to_keep must be >= 0, got ",
                   options_.max_to_keep);
  CHORUS_CHECK_ARG(ckpt::valid_prefix(options_.prefix), "checkpoint: bad prefix '", options_.prefix,
                   "': use [A-Za-z0-9._-]+ not starting with '.'");
  make_directory(directory_);
  ckpt::clean_leftovers(directory_, options_.prefix);
}

std::string CheckpointManager::path_of(int64_t step) const {
  return ckpt::join(directory_, ckpt::committed_name(options_.prefix, step));
}

std::string CheckpointManager::save(int64_t step, const std::map<std::string, std::string>& files) {
  CHORUS_CHECK_ARG(step >= 0, "checkpoint: step must be >= 0, got ", step);
  check_names(files);
  ckpt::TempCheckpointDir temp(directory_, options_.prefix, step);
  ckpt::Manifest manifest;
  manifest.step = step;
  for (const auto& [name, bytes] : files) {
    ckpt::write_new_file(temp.fd(), name, bytes, ckpt::join(temp.path(), name));
    manifest.files.push_back({name, bytes.size(), ckpt::sha256_hex(bytes)});
  }
  // Written last: a directory with a MANIFEST has all its files.
  ckpt::write_new_file(temp.fd(), ckpt::kManifestName, ckpt::encode_manifest(manifest),
                       ckpt::join(temp.path(), ckpt::kManifestName));
  ckpt::fsync_fd(temp.fd(), temp.path());  // the files' directory entries
  if (options_.before_commit) options_.before_commit(temp.path());
  std::string path = temp.commit();
  enforce_max_to_keep(step);
  return path;
}

void CheckpointManager::enforce_max_to_keep(int64_t just_saved) {
  if (options_.max_to_keep == 0) return;
  std::vector<CheckpointInfo> others;
  for (CheckpointInfo& info : list()) {
    if (info.step != just_saved) others.push_back(std::move(info));
  }
  const size_t keep_others = static_cast<size_t>(options_.max_to_keep) - 1;
  for (size_t i = 0; i + keep_others < others.size(); ++i) delete_checkpoint(others[i]);
}

void CheckpointManager::delete_checkpoint(const CheckpointInfo& info) {
  ckpt::discard(directory_, options_.prefix, info.path);  // a failure is logged
}

std::vector<CheckpointInfo> CheckpointManager::list() const {
  std::vector<CheckpointInfo> out;
  for (const std::string& name : ckpt::list_dir(directory_)) {
    auto parsed = ckpt::parse_name(options_.prefix, name);
    if (!parsed || parsed->kind != ckpt::Kind::kCommitted) continue;
    std::string path = ckpt::join(directory_, name);
    if (ckpt::is_regular_file(ckpt::join(path, ckpt::kManifestName))) {
      out.push_back({parsed->step, std::move(path)});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointInfo> CheckpointManager::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

Checkpoint CheckpointManager::load(const CheckpointInfo& info) const {
  // Everything is opened relative to one directory descriptor, so a concurrent rename of
  // the directory (deletion by another process's max_to_keep) cannot mix two checkpoints.
  net::Fd dir = ckpt::open_dir(info.path, /*missing_ok=*/true);
  if (!dir.valid()) {
    CHORUS_THROW(InvalidArgument, "checkpoint: no checkpoint of step ", info.step, " ('", info.path,
                 "' does not exist)");
  }
  ckpt::Manifest manifest = ckpt::parse_manifest(read_manifest(dir.get(), info.path), info.path);
  if (manifest.step != info.step) {
    CHORUS_THROW(InvalidArgument, "checkpoint '", info.path, "': MANIFEST is of step ",
                 manifest.step, ", the directory name says ", info.step);
  }
  Checkpoint out{info.step, info.path, {}};
  for (const ckpt::FileEntry& entry : manifest.files) {
    out.files.emplace(entry.name, read_verified(dir.get(), entry, info.path));
  }
  return out;
}

Checkpoint CheckpointManager::restore(int64_t step) const {
  CHORUS_CHECK_ARG(step >= 0, "checkpoint: step must be >= 0, got ", step);
  return load({step, path_of(step)});
}

std::optional<Checkpoint> CheckpointManager::restore_latest() const {
  auto all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      return load(*it);
    } catch (const Error& e) {  // corrupt (InvalidArgument) or unreadable (IoError)
      CHORUS_LOG(kWarning, "checkpoint")
          << "skipping checkpoint of step " << it->step << " at '" << it->path << "': " << e.what();
    }
  }
  return std::nullopt;
}

std::optional<CheckpointInfo> CheckpointManager::wait_for_newer(int64_t after_step,
                                                                milliseconds timeout) const {
  Deadline deadline = Deadline::after(timeout);
  milliseconds pause = kFirstPollSleep;
  for (;;) {
    auto newest = latest();
    if (newest && newest->step > after_step) return newest;
    if (deadline.expired()) return std::nullopt;
    std::this_thread::sleep_for(std::min(pause, milliseconds(deadline.remaining_ms())));
    pause = std::min(pause * 2, kMaxPollSleep);
  }
}

void CheckpointManager::remove_all() {
  bool ok = ckpt::clean_leftovers(directory_, options_.prefix);
  for (const CheckpointInfo& info : list()) {
    ok = ckpt::discard(directory_, options_.prefix, info.path) && ok;
  }
  if (!ok) {
    CHORUS_THROW(IoError, "checkpoint: could not remove everything under '", directory_,
                 "' (see the warnings above)");
  }
  // Fails harmlessly when anything else (a live save, other prefixes) is still there.
  ::rmdir(directory_.c_str());
}

}  // namespace chorus
