#include "scalar_board.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "http_server.h"

namespace chorus::web {
namespace {

constexpr int kMaxDepth = 8;        // directories below the log directory
constexpr size_t kMaxFiles = 4096;  // event files followed

bool is_event_file(const std::string& name) {
  return name.find("tfevents") != std::string::npos && name[0] != '.';
}

}  // namespace

ScalarBoard::ScalarBoard(std::string logdir, std::chrono::milliseconds min_rescan)
    : logdir_(std::move(logdir)), min_rescan_(min_rescan) {}

void ScalarBoard::walk(const std::string& dir, const std::string& run, int depth) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string path = dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth < kMaxDepth) walk(path, run == "." ? name : run + "/" + name, depth + 1);
      continue;
    }
    if (!S_ISREG(st.st_mode) || !is_event_file(name)) continue;
    if (!files_.count(path) && files_.size() >= kMaxFiles) continue;
    seen_[path] = true;
    File& f = files_[path];
    f.run = run;
    int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (f.size == st.st_size && f.mtime_ns == mtime) continue;
    try {
      f.scalars = read_scalars(path);
      f.error.clear();
    } catch (const std::exception& e) {
      // A writer in the middle of a record, or a damaged file: keep what was read before.
      f.error = e.what();
    }
    f.size = st.st_size;
    f.mtime_ns = mtime;
  }
}

void ScalarBoard::rescan_locked() {
  auto now = std::chrono::steady_clock::now();
  if (scanned_ && now - last_scan_ < min_rescan_) return;
  scanned_ = true;
  last_scan_ = now;
  seen_.clear();
  walk(logdir_, ".", 0);
  for (auto it = files_.begin(); it != files_.end();) {
    it = seen_.count(it->first) ? std::next(it) : files_.erase(it);
  }
}

std::map<std::string, std::vector<Series>> ScalarBoard::curves() {
  std::lock_guard<std::mutex> lock(mu_);
  rescan_locked();
  // tag -> run -> points
  std::map<std::string, std::map<std::string, std::vector<std::pair<double, double>>>> by_tag;
  for (const auto& [path, f] : files_) {
    for (const ScalarEvent& s : f.scalars) {
      by_tag[s.tag][f.run].emplace_back(static_cast<double>(s.step), s.value);
    }
  }
  std::map<std::string, std::vector<Series>> out;
  for (auto& [tag, runs] : by_tag) {
    for (auto& [run, pts] : runs) {
      std::stable_sort(pts.begin(), pts.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      out[tag].push_back(Series{run, std::move(pts)});
    }
  }
  return out;
}

std::vector<std::string> ScalarBoard::runs() {
  std::lock_guard<std::mutex> lock(mu_);
  rescan_locked();
  std::set<std::string> runs;
  for (const auto& [path, f] : files_) runs.insert(f.run);
  return {runs.begin(), runs.end()};
}

std::vector<std::string> ScalarBoard::errors() {
  std::lock_guard<std::mutex> lock(mu_);
  rescan_locked();
  std::vector<std::string> out;
  for (const auto& [path, f] : files_) {
    if (!f.error.empty()) out.push_back(f.error);
  }
  return out;
}

std::string ScalarBoard::charts_html() {
  auto all = curves();
  std::string out;
  if (all.empty()) {
    out = "<p class=\"empty\">no scalars yet under " + html_escape(logdir_) + "</p>";
  }
  for (const auto& [tag, series] : all) {
    ChartOptions o;
    o.title = tag;
    out += "<div class=\"card\">" + svg_line_chart(series, o) + "</div>";
  }
  for (const std::string& e : errors()) {
    out += "<p class=\"error\">" + html_escape(e) + "</p>";
  }
  return out;
}

}  // namespace chorus::web
