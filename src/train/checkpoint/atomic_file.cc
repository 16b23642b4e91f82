// write_file_atomically and read_file: the single-file helpers of checkpoint.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "chorus/error.h"
#include "chorus/train/checkpoint.h"
#include "train/checkpoint/commit.h"
#include "train/checkpoint/file_io.h"

namespace chorus {
namespace {

// Leaves room for the suffix within NAME_MAX (255).
constexpr size_t kMaxTempStem = 200;

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  std::filesystem::path p(path);
  const std::string name = p.filename().string();
  CHORUS_CHECK_ARG(!name.empty() && name != "." && name != "..", "write_file_atomically: '", path,
                   "' does not name a file");
  std::string dir = p.parent_path().string();
  if (dir.empty()) dir = ".";
  const std::string temp = "." + name.substr(0, kMaxTempStem) + ".tmp-" +
                           std::to_string(::getpid()) + "-" + ckpt::random_hex();
  const std::string temp_path = ckpt::join(dir, temp);
  net::Fd dir_fd = ckpt::open_dir(dir);
  try {
    ckpt::write_new_file(dir_fd.get(), temp, bytes, temp_path);
  } catch (...) {
    ::unlinkat(dir_fd.get(), temp.c_str(), 0);
    throw;
  }
  if (::renameat(dir_fd.get(), temp.c_str(), dir_fd.get(), name.c_str()) != 0) {
    int err = errno;
    ::unlinkat(dir_fd.get(), temp.c_str(), 0);
    ckpt::throw_io("cannot rename '" + temp_path + "' onto", path, err);
  }
  ckpt::fsync_fd(dir_fd.get(), dir);  // makes the rename durable
}

std::string read_file(const std::string& path) {
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) ckpt::throw_io("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) ckpt::throw_io("cannot stat", path, errno);
  // The size is a hint: files in /proc report 0, and a file may grow while being read.
  std::string out = ckpt::read_fd(fd.get(), static_cast<size_t>(st.st_size), path);
  for (;;) {
    std::string more = ckpt::read_fd(fd.get(), 1 << 16, path);
    if (more.empty()) return out;
    out += more;
  }
}

}  // namespace chorus
