#include "train/progress_bar.h"

#include <cmath>

namespace chorus {

ProgressBar::ProgressBar(int64_t total, std::FILE* out, bool interactive)
    : total_(total),
      out_(out),
      interactive_(interactive),
      start_(std::chrono::steady_clock::now()) {}

double ProgressBar::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::bar(int64_t done, int64_t total, int width) {
  std::string counts = std::to_string(done);
  if (total <= 0) return counts + "/Unknown";
  std::string total_text = std::to_string(total);
  counts = std::string(total_text.size() - std::min(total_text.size(), counts.size()), ' ') +
           counts + "/" + total_text;
  int filled = static_cast<int>(static_cast<double>(width) * static_cast<double>(done) /
                                static_cast<double>(total));
  filled = std::max(0, std::min(width, filled));
  std::string b(static_cast<size_t>(width), '.');
  for (int i = 0; i < filled; ++i) b[static_cast<size_t>(i)] = '=';
  if (filled > 0 && filled < width) b[static_cast<size_t>(filled - 1)] = '>';
  return counts + " [" + b + "]";
}

std::string ProgressBar::metrics(const std::map<std::string, double>& logs) {
  std::string out;
  char buf[64];
  for (const auto& [name, value] : logs) {
    std::snprintf(buf, sizeof buf, "%.4f", value);
    out += " - " + name + ": " + buf;
  }
  return out;
}

std::string ProgressBar::duration(double seconds) {
  char buf[32];
  if (seconds >= 3600) {
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", static_cast<int>(seconds / 3600),
                  static_cast<int>(std::fmod(seconds, 3600) / 60),
                  static_cast<int>(std::fmod(seconds, 60)));
  } else if (seconds >= 60) {
    std::snprintf(buf, sizeof buf, "%d:%02d", static_cast<int>(seconds / 60),
                  static_cast<int>(std::fmod(seconds, 60)));
  } else {
    std::snprintf(buf, sizeof buf, "%ds", static_cast<int>(std::lround(seconds)));
  }
  return buf;
}

void ProgressBar::update(int64_t done, const std::map<std::string, double>& logs) {
  const double t = elapsed();
  if (interactive_) {
    if (last_draw_ >= 0 && t - last_draw_ < 0.1) return;
  } else {
    if (total_ <= 0) return;
    const int64_t tenth = done * 10 / total_;
    if (tenth == last_tenth_ || done >= total_) return;
    last_tenth_ = tenth;
  }
  last_draw_ = t;
  std::string eta;
  if (total_ > 0 && done > 0) {
    eta = " - ETA: " + duration(t / static_cast<double>(done) * static_cast<double>(total_ - done));
  }
  emit(bar(done, total_) + eta + metrics(logs), false);
}

void ProgressBar::finish(int64_t done, const std::map<std::string, double>& logs) {
  const double t = elapsed();
  char per_step[32];
  const double ms = done > 0 ? 1000.0 * t / static_cast<double>(done) : 0.0;
  std::snprintf(per_step, sizeof per_step, " %.0fms/step", ms);
  emit(bar(done, total_ > 0 ? total_ : done) + " - " + duration(t) + per_step + metrics(logs),
       true);
}

void ProgressBar::emit(const std::string& line, bool final) {
  if (interactive_) {
    std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace chorus
