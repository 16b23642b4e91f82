#include "train/checkpoint/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "chorus/error.h"
#include "util/log.h"

namespace chorus::ckpt {

void throw_io(const std::string& what, const std::string& path, int err) {
  CHORUS_THROW(IoError, "checkpoint: ", what, " '", path, "': ", std::strerror(err));
}

namespace {

void write_all(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot write", path, errno);
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void write_new_file(int dir_fd, const std::string& name, std::string_view bytes,
                    const std::string& path) {
  net::Fd fd(
      ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (!fd.valid()) throw_io("cannot create", path, errno);
  write_all(fd.get(), bytes, path);
  fsync_fd(fd.get(), path);
  if (::close(fd.release()) != 0) throw_io("cannot close", path, errno);
}

net::Fd open_dir(const std::string& path, bool missing_ok) {
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() && !(missing_ok && errno == ENOENT))
    throw_io("cannot open directory", path, errno);
  return fd;
}

void fsync_fd(int fd, const std::string& path) {
  // EINVAL: the file system cannot sync this kind of file (some do not for directories);
  // there is nothing stronger to do, and failing would make checkpoints impossible there.
  if (::fsync(fd) != 0 && errno != EINVAL) throw_io("cannot fsync", path, errno);
}

void fsync_dir(const std::string& path) {
  net::Fd fd = open_dir(path);
  fsync_fd(fd.get(), path);
}

std::string read_fd(int fd, size_t size, const std::string& path) {
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd, out.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot read", path, errno);
    if (n == 0) break;  // shorter than expected: the caller reports it
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) {
    if (errno == ENOENT) return names;
    throw_io("cannot list", path, errno);
  }
  errno = 0;
  while (const dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) throw_io("cannot list", path, err);
  return names;
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool remove_tree(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return true;
  if (errno != EISDIR && errno != EPERM) {  // POSIX allows EPERM for directories
    CHORUS_LOG(kWarning, "checkpoint")
        << "cannot remove '" << path << "': " << std::strerror(errno);
    return false;
  }
  bool ok = true;
  try {
    for (const std::string& name : list_dir(path)) ok = remove_tree(path + "/" + name) && ok;
  } catch (const IoError& e) {
    CHORUS_LOG(kWarning, "checkpoint") << e.what();
    return false;
  }
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
    CHORUS_LOG(kWarning, "checkpoint")
        << "cannot remove '" << path << "': " << std::strerror(errno);
    return false;
  }
  return ok;
}

std::string random_hex() {
  unsigned char bytes[8];
  size_t done = 0;
  while (done < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + done, sizeof(bytes) - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("getrandom failed for", "checkpoint name", errno);
    done += static_cast<size_t>(n);
  }
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

}  // namespace chorus::ckpt
