// POSIX file helpers for checkpoints: whole-file writes with fsync, bounded reads, directory
// fsync, a removal that tolerates others removing the same tree, random name suffixes.
// Every failure is an IoError naming the path and strerror(errno).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/net.h"

namespace chorus::ckpt {

// Throws IoError "<what> '<path>': <strerror(err)>".
[[noreturn]] void throw_io(const std::string& what, const std::string& path, int err);

// Creates `name` in the directory `dir_fd` (which must not hold it yet), writes `bytes`,
// fsyncs and closes it (close errors are reported: NFS reports write errors there).
// `path` is for messages.
void write_new_file(int dir_fd, const std::string& name, std::string_view bytes,
                    const std::string& path);

// Opens a directory for fsync / flock / openat. Returns an invalid Fd when it does not
// exist and `missing_ok`; throws IoError otherwise.
net::Fd open_dir(const std::string& path, bool missing_ok = false);
void fsync_fd(int fd, const std::string& path);
void fsync_dir(const std::string& path);

// Reads exactly `size` bytes of an open file. Returns fewer only if the file ends first.
std::string read_fd(int fd, size_t size, const std::string& path);

// Names in a directory (without "." and ".."); empty when it does not exist.
std::vector<std::string> list_dir(const std::string& path);

// True when `path` exists and is a regular file (not following a final symlink).
bool is_regular_file(const std::string& path);

// Removes a file or a directory tree, ignoring entries that vanish meanwhile (another
// process may be removing the same tree). Does not follow symlinks. Returns false and
// logs a warning if something could not be removed.
bool remove_tree(const std::string& path);

// 8 random bytes in hex, for names no other process will pick.
std::string random_hex();

}  // namespace chorus::ckpt
