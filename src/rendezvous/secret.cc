// The job secret. generate() returns 32 random bytes written as 64 hexadecimal characters,
// so the same secret can travel in CHORUS_SECRET (environment values cannot hold NUL
// bytes), in a file, or on a launcher's pipe without any further encoding.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "chorus/error.h"
#include "chorus/store.h"
#include "rendezvous/crypto.h"
#include "util/env.h"
#include "util/net.h"

namespace chorus {
namespace {

constexpr size_t kSecretEntropyBytes = 32;
constexpr off_t kMaxSecretFileBytes = 64 << 10;  // a secret file is tiny; refuse anything big

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string read_all(int fd, const std::string& path) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return out;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      CHORUS_THROW(IoError, "cannot read secret file '", path, "': ", std::strerror(errno));
    out.append(buf, static_cast<size_t>(n));
    CHORUS_CHECK_ARG(out.size() <= static_cast<size_t>(kMaxSecretFileBytes), "secret file '", path,
                     "' is larger than ", kMaxSecretFileBytes, " bytes");
  }
}

// Files written by hand usually end in a newline that is not part of the secret.
void strip_one_newline(std::string& s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
}

}  // namespace

Secret Secret::generate() {
  return Secret(rendezvous::to_hex(rendezvous::random_bytes(kSecretEntropyBytes)));
}

std::optional<Secret> Secret::from_env() {
  auto raw = env_string("CHORUS_SECRET");
  auto file = env_string("CHORUS_SECRET_FILE");
  CHORUS_CHECK_ARG(!(raw && file),
                   "both CHORUS_SECRET and CHORUS_SECRET_FILE are set; set only one");
  if (raw) return Secret(*raw);
  if (file) return from_file(*file);
  return std::nullopt;
}

Secret Secret::from_file(const std::string& path) {
  // Links are followed (secrets are often mounted as links); the mode checked below is
  // the target's.
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    CHORUS_THROW(InvalidArgument, "cannot open secret file '", path, "': ", std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    CHORUS_THROW(IoError, "cannot stat secret file '", path, "': ", std::strerror(errno));
  }
  CHORUS_CHECK_ARG(S_ISREG(st.st_mode), "secret file '", path, "' is not a regular file");
  // Checked on the open descriptor, not the name, so the file cannot change in between.
  CHORUS_CHECK_ARG((st.st_mode & 077) == 0, "secret file '", path, "' has mode ",
                   octal_mode(st.st_mode), ": it must be readable by its owner only (chmod 600 '",
                   path, "')");
  std::string bytes = read_all(fd.get(), path);
  strip_one_newline(bytes);
  CHORUS_CHECK_ARG(!bytes.empty(), "secret file '", path, "' is empty");
  return Secret(std::move(bytes));
}

void Secret::write_file(const std::string& path) const {
  CHORUS_CHECK_ARG(!empty(), "cannot write an empty secret to '", path, "'");
  // O_EXCL: never follow a planted link or reuse a file someone else may already read.
  net::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    CHORUS_THROW(IoError, "cannot create secret file '", path, "': ", std::strerror(errno));
  }
  size_t done = 0;
  while (done < bytes_.size()) {
    ssize_t n = ::write(fd.get(), bytes_.data() + done, bytes_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      CHORUS_THROW(IoError, "cannot write secret file '", path, "': ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) {
    CHORUS_THROW(IoError, "cannot sync secret file '", path, "': ", std::strerror(errno));
  }
}

}  // namespace chorus
