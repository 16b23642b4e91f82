#include "relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "options.h"

namespace chorus::run {

void write_fully(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void say(const std::string& message) {
  std::string line = "chorusrun: " + message + "\n";
  write_fully(2, line.data(), line.size());
}

LineRelay::LineRelay(std::string label, int out_fd, const std::string& log_path) : fd_(out_fd) {
  if (!log_path.empty()) {
    fd_ = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw UsageError("cannot open " + log_path + ": " + std::strerror(errno));
    owns_fd_ = true;
  } else if (!label.empty()) {
    prefix_ = "[" + label + "] ";
  }
}

LineRelay::~LineRelay() {
  finish();
  if (owns_fd_) ::close(fd_);
}

void LineRelay::feed(const char* data, size_t n) {
  pending_.append(data, n);
  size_t start = 0;
  for (;;) {
    size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    emit(pending_.data() + start, nl - start);
    start = nl + 1;
  }
  pending_.erase(0, start);
  while (pending_.size() >= kMaxLine) {
    emit(pending_.data(), kMaxLine);
    pending_.erase(0, kMaxLine);
  }
}

void LineRelay::finish() {
  if (pending_.empty()) return;
  emit(pending_.data(), pending_.size());
  pending_.clear();
}

void LineRelay::emit(const char* line, size_t n) {
  if (observer_) observer_(std::string_view(line, n));
  // One buffer, one write(): a pipe or terminal receives the whole line at once.
  std::string out;
  out.reserve(prefix_.size() + n + 1);
  out.append(prefix_).append(line, n).push_back('\n');
  write_fully(fd_, out.data(), out.size());
}

}  // namespace chorus::run
