#include "util/log.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace chorus {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("CHORUS_LOG_LEVEL");
  if (!v) return LogLevel::kWarning;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  if (!std::strcmp(v, "info")) return LogLevel::kInfo;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  return LogLevel::kWarning;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = level_from_env();
  return level <= threshold;
}

void log_line(LogLevel level, const char* tag, const std::string& message) {
  std::string line =
      std::string("chorus ") + level_name(level) + " [" + tag + "] " + message + "\n";
  // One write() per line keeps lines whole even across processes sharing stderr.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace chorus
