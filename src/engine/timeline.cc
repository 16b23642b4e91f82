#include "engine/timeline.h"

#include <cerrno>
#include <cstring>

#include "chorus/error.h"

namespace chorus::engine {
namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

long long micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    CHORUS_THROW(IoError, "timeline: cannot open ", path, ": ", std::strerror(errno));
  }
  std::fputs("[\n", file_);
  first_event_ = true;
  origin_ = Clock::now();
  rows_.clear();
  active_.store(true);
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
}

void Timeline::close_locked() {
  active_.store(false);
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

int Timeline::row_locked(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int row = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, row);
  // Metadata event: names the row after the tensor in the viewer.
  std::fprintf(file_,
               "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
               "\"args\":{\"name\":\"%s\"}}",
               first_event_ ? "" : ",\n", row, json_escape(tensor).c_str());
  first_event_ = false;
  return row;
}

void Timeline::span(const std::string& tensor, const char* phase, Clock::time_point begin,
                    Clock::time_point end, const char* plan) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  int row = row_locked(tensor);
  long long ts = micros(begin - origin_);
  long long dur = micros(end - begin);
  std::fprintf(file_,
               ",\n{\"name\":\"%s\",\"cat\":\"chorus\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,"
               "\"ts\":%lld,\"dur\":%lld,\"args\":{\"tensor\":\"%s\"%s%s%s}}",
               phase, row, ts < 0 ? 0 : ts, dur < 0 ? 0 : dur, json_escape(tensor).c_str(),
               plan && *plan ? ",\"plan\":\"" : "", plan && *plan ? plan : "",
               plan && *plan ? "\"" : "");
}

}  // namespace chorus::engine
