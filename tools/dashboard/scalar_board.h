// chorus-board's model: every TensorBoard event file under a log directory, read with
// chorus::read_scalars (chorus's own scalars and TensorFlow 2's), grouped by tag, one
// series per run. A run is the directory of an event file relative to the log directory
// ("train", "validation", "run2/train"; "." for the log directory itself), as TensorBoard
// names them. Files are re-read when their size or modification time changed, at most once
// per `min_rescan` (so a page refreshing often costs one directory walk a second).
//
// Thread safety: every method may be called from several threads (one mutex).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/train/tfevents.h"
#include "svg_chart.h"

namespace chorus::web {

class ScalarBoard {
 public:
  explicit ScalarBoard(std::string logdir,
                       std::chrono::milliseconds min_rescan = std::chrono::milliseconds(1000));

  // Rescans if due, then returns tag -> series (one per run, named after it), tags sorted.
  std::map<std::string, std::vector<Series>> curves();
  // The runs found, sorted; and files that could not be read, with why.
  std::vector<std::string> runs();
  std::vector<std::string> errors();

  // The page: every tag's chart, side by side (HTML fragment of SVGs).
  std::string charts_html();

 private:
  struct File {
    std::string run;
    off_t size = -1;
    int64_t mtime_ns = -1;
    std::vector<ScalarEvent> scalars;
    std::string error;
  };
  void rescan_locked();
  void walk(const std::string& dir, const std::string& run, int depth);

  const std::string logdir_;
  const std::chrono::milliseconds min_rescan_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_scan_{};
  bool scanned_ = false;
  std::map<std::string, File> files_;  // by path; guarded by mu_
  std::map<std::string, bool> seen_;   // paths found by the current walk
};

}  // namespace chorus::web
