// Minimal thread-safe logging to stderr: one line per call, never interleaved.
// Level from CHORUS_LOG_LEVEL (error, warning, info, debug; default warning).
#pragma once

#include <sstream>
#include <string>

namespace chorus {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

bool log_enabled(LogLevel level);
// Writes "chorus <LEVEL> [tag] message\n" atomically.
void log_line(LogLevel level, const char* tag, const std::string& message);

}  // namespace chorus

// CHORUS_LOG(kWarning, "store") << "dropped client " << peer;
#define CHORUS_LOG(level, tag)                                                                     \
  for (bool chorus_log_once_ = ::chorus::log_enabled(::chorus::LogLevel::level); chorus_log_once_; \
       chorus_log_once_ = false)                                                                   \
  ::chorus::detail::LogStream(::chorus::LogLevel::level, tag).stream()

namespace chorus::detail {
class LogStream {
 public:
  LogStream(LogLevel level, const char* tag) : level_(level), tag_(tag) {}
  ~LogStream() { log_line(level_, tag_, out_.str()); }
  std::ostringstream& stream() { return out_; }

 private:
  LogLevel level_;
  const char* tag_;
  std::ostringstream out_;
};
}  // namespace chorus::detail
