#include "util/env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "chorus/error.h"

namespace chorus {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> env_int(const char* name) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text->c_str(), &end, 10);
  CHORUS_CHECK_ARG(errno == 0 && end && *end == '\0', "environment variable ", name, "='", *text,
                   "' is not an integer");
  return value;
}

int64_t env_int_or(const char* name, int64_t fallback) { return env_int(name).value_or(fallback); }

double env_double_or(const char* name, double fallback) {
  auto text = env_string(name);
  if (!text) return fallback;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text->c_str(), &end);
  CHORUS_CHECK_ARG(errno == 0 && end && *end == '\0', "environment variable ", name, "='", *text,
                   "' is not a number");
  return value;
}

std::chrono::milliseconds default_timeout() {
  double seconds = env_double_or("CHORUS_TIMEOUT_SECONDS", 60.0);
  CHORUS_CHECK_ARG(seconds > 0, "CHORUS_TIMEOUT_SECONDS must be positive, got ", seconds);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

std::string user_private_dir() {
  std::string dir = "/tmp/chorus-" + std::to_string(::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    CHORUS_THROW(IoError, "cannot create ", dir, ": ", std::strerror(errno));
  }
  struct stat st {};
  CHORUS_CHECK_ARG(::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
                       st.st_uid == ::getuid() && (st.st_mode & 077) == 0,
                   dir, " must be a directory owned by this user with mode 0700");
  return dir;
}

}  // namespace chorus
