// The model behind `chorusrun --dashboard`: what the launcher knows about its ranks (where
// they run, their pids, how they ended, restarts, the engine's stall warnings in their
// output) joined with what the ranks report through the store (chorus/report.h), turned
// into the page's fragments. No sockets, no threads of its own: chorusrun's supervising
// thread calls the launcher events, its report poller calls report(), and the HTTP server's
// threads call the page methods.
//
// A rank's state: "starting" (no report yet), "live", "stalled" (its step count has not
// moved for Options::stall_seconds, or it sent no report for that long, or its process is
// stopped (SIGSTOP, state T in /proc, for local ranks), "exited" (exit code 0), "dead"
// (failed, killed or stopped by the launcher after another's failure), "restarting"
// (the job is being started again).
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "report/report_format.h"
#include "svg_chart.h"

namespace chorus::web {

class JobBoard {
 public:
  struct Options {
    int np = 1;
    std::string title;   // the program's command line
    std::string notice;  // shown on the page (e.g. that the URL carries the secret)
    double stall_seconds = 10;
    size_t max_points = 4000;  // per curve; older points are thinned beyond
    // Seconds on the page's clock; tests substitute their own.
    std::function<double()> now;
    // Whether a local process is stopped (SIGSTOP); tests substitute their own.
    std::function<bool(int pid)> stopped;
  };

  struct RankProcess {
    int rank = 0;
    std::string host;
    int pid = -1;
    bool local = true;
  };

  explicit JobBoard(Options options);

  // Launcher events.
  void attempt_started(int restart, const std::vector<RankProcess>& ranks);
  void rank_exited(int rank, bool ok, const std::string& what);
  void attempt_ended(const std::string& failure, bool restarting);
  void job_ended(const std::string& summary);
  void output_line(int rank, const std::string& line);  // looks for stall warnings
  // A rank's report as read from the store (text of chorus/report.h's format).
  void report(int rank, const std::string& text);

  int restart() const;
  // The HTML fragment the page polls: job line, rank table, charts, events.
  std::string fragment_html();
  // The same facts for scripts and tests.
  std::string state_json();

  // Whether a local process is stopped: its /proc/<pid>/stat says T or t.
  static bool process_stopped(int pid);

 private:
  struct Sample {
    double time = 0;  // the rank's clock, seconds
    report::ParsedReport r;
  };
  struct Rank {
    RankProcess process;
    std::string state = "starting";
    std::string detail;
    bool have_report = false;
    Sample last, prev;
    double received = 0;       // our clock, when the last report came
    double last_progress = 0;  // our clock, when the step count last moved
    double steps_per_s = 0, samples_per_s = 0, compute = 0, wait = 0, data = 0;
    double bytes_per_s = 0, fused_per_cycle = 0, cache_hit_rate = -1;
  };

  double now() const;
  void update_states_locked();
  void rates_locked(Rank& r);
  void add_point_locked(const std::string& chart, const std::string& series, double x, double y);
  void event_locked(const std::string& text);
  std::string rank_table_locked() const;
  std::string charts_locked() const;

  Options options_;
  mutable std::mutex mu_;
  double started_ = 0;
  int restart_ = 0;
  std::string job_state_ = "starting";
  std::vector<Rank> ranks_;
  std::deque<std::string> events_;
  // chart -> series -> points; chart order as first added.
  std::vector<std::string> chart_order_;
  std::map<std::string, std::map<std::string, std::vector<std::pair<double, double>>>> charts_;
};

}  // namespace chorus::web
