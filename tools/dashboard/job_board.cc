#include "job_board.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "http_server.h"

namespace chorus::web {
namespace {

constexpr size_t kMaxEvents = 200;
const char* const kLoss = "loss";

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string mib(double bytes) { return fixed(bytes / (1 << 20), 0) + " MiB"; }

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The time breakdown as a bar of three colours.
std::string breakdown_bar(double compute, double wait, double data) {
  double total = compute + wait + data;
  if (!(total > 0)) return "";
  auto part = [&](double v, const char* colour, const char* what) {
    int px = static_cast<int>(std::lround(120 * v / total));
    return "<span class=\"bar\" title=\"" + std::string(what) +
           "\" style=\"width:" + std::to_string(px) + "px;background:" + colour + "\"></span>";
  };
  return part(compute, "#1f77b4", "compute") + part(wait, "#d62728", "allreduce wait") +
         part(data, "#2ca02c", "data");
}

}  // namespace

JobBoard::JobBoard(Options options) : options_(std::move(options)) {
  if (!options_.now) options_.now = steady_seconds;
  if (!options_.stopped) options_.stopped = process_stopped;
  started_ = now();
  ranks_.resize(static_cast<size_t>(std::max(options_.np, 0)));
  for (size_t i = 0; i < ranks_.size(); ++i) ranks_[i].process.rank = static_cast<int>(i);
}

double JobBoard::now() const { return options_.now(); }

bool JobBoard::process_stopped(int pid) {
  if (pid <= 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  char state = text[paren + 2];
  return state == 'T' || state == 't';
}

void JobBoard::event_locked(const std::string& text) {
  double t = now() - started_;
  events_.push_back("[" + fixed(t, 1) + " s] " + text);
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void JobBoard::attempt_started(int restart, const std::vector<RankProcess>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  restart_ = restart;
  job_state_ = restart == 0 ? "running" : "running (restart " + std::to_string(restart) + ")";
  for (const RankProcess& p : ranks) {
    if (p.rank < 0 || p.rank >= static_cast<int>(ranks_.size())) continue;
    Rank& r = ranks_[static_cast<size_t>(p.rank)];
    r = Rank{};
    r.process = p;
    r.last_progress = r.received = now();
  }
  if (restart > 0) event_locked("attempt " + std::to_string(restart) + " started");
}

void JobBoard::rank_exited(int rank, bool ok, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  Rank& r = ranks_[static_cast<size_t>(rank)];
  r.state = ok ? "exited" : "dead";
  r.detail = what;
  event_locked(what);
}

void JobBoard::attempt_ended(const std::string& failure, bool restarting) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!restarting) return;
  job_state_ = "restarting";
  for (Rank& r : ranks_) r.state = "restarting";
  event_locked("restarting the job after: " + failure);
}

void JobBoard::job_ended(const std::string& summary) {
  std::lock_guard<std::mutex> lock(mu_);
  job_state_ = "ended: " + summary;
  event_locked("job ended: " + summary);
}

void JobBoard::output_line(int rank, const std::string& line) {
  // The engine's stall inspector (docs/engine.md): "... [engine] stall: ... tensor 'x'
  // (allreduce) submitted by ranks [0], missing ranks [1] ...".
  size_t at = line.find("[engine] stall:");
  if (at == std::string::npos) return;
  std::lock_guard<std::mutex> lock(mu_);
  event_locked("stall warning from rank " + std::to_string(rank) + ":" + line.substr(at + 15, 600));
}

int JobBoard::restart() const {
  std::lock_guard<std::mutex> lock(mu_);
  return restart_;
}

void JobBoard::add_point_locked(const std::string& chart, const std::string& series, double x,
                                double y) {
  if (!std::isfinite(x) || !std::isfinite(y)) return;
  if (!charts_.count(chart)) chart_order_.push_back(chart);
  auto& pts = charts_[chart][series];
  pts.emplace_back(x, y);
  if (pts.size() > options_.max_points) {  // keep every other point of the older half
    std::vector<std::pair<double, double>> kept;
    size_t half = pts.size() / 2;
    for (size_t i = 0; i < half; i += 2) kept.push_back(pts[i]);
    kept.insert(kept.end(), pts.begin() + static_cast<long>(half), pts.end());
    pts = std::move(kept);
  }
}

void JobBoard::rates_locked(Rank& r) {
  const report::ParsedReport &a = r.prev.r, &b = r.last.r;
  double dt = r.last.time - r.prev.time;
  if (!(dt > 0)) return;
  auto d = [&](const char* name) { return b.get(name) - a.get(name); };
  r.steps_per_s = d("steps") / dt;
  r.samples_per_s = d("samples") / dt;
  r.compute = d("compute_s"), r.wait = d("wait_s"), r.data = d("data_s");
  // The engine's own counts when the rank reports them (EngineStats::ops, op_bytes), else
  // what the training loop says it handed to the collectives.
  const bool engine = b.values.count("counter.engine_ops") > 0;
  r.bytes_per_s = (engine ? d("counter.engine_op_bytes") : d("bytes")) / dt;
  double cycles = d("counter.engine_cycles");
  r.fused_per_cycle = cycles > 0 ? d("counter.engine_fused_tensors") / cycles : 0;
  double ops = engine ? d("counter.engine_ops") : d("tensors");
  r.cache_hit_rate = ops > 0 ? std::min(1.0, d("counter.engine_cache_hits") / ops) : -1;
}

void JobBoard::report(int rank, const std::string& text) {
  report::ParsedReport parsed = report::parse_report(text);
  std::lock_guard<std::mutex> lock(mu_);
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  if (static_cast<int>(parsed.get("restart", -1)) != restart_) return;  // an older attempt's
  Rank& r = ranks_[static_cast<size_t>(rank)];
  double time = parsed.get("time");
  if (r.have_report && time <= r.last.time) return;  // nothing new
  if (!parsed.host.empty()) r.process.host = parsed.host;
  double t = now();
  const double prev_steps = r.have_report ? r.last.r.get("steps") : -1;
  r.received = t;
  if (!r.have_report || parsed.get("steps") != r.last.r.get("steps")) r.last_progress = t;
  r.prev = r.have_report ? r.last : Sample{time, parsed};
  r.last = Sample{time, parsed};
  r.have_report = true;
  rates_locked(r);
  const std::string who = "rank " + std::to_string(rank);
  double step = parsed.get("steps");
  for (const auto& [name, value] : parsed.values) {
    if (name.rfind("scalar.", 0) == 0 && step > prev_steps) {
      add_point_locked(name == "scalar.loss" ? kLoss : name.substr(7), who, step, value);
    }
  }
  double x = t - started_;
  add_point_locked("samples/s", who, x, r.samples_per_s);
  if (rank == 0 && r.prev.time < r.last.time) {
    add_point_locked("collective MB/s (rank 0)", "MB/s", x, r.bytes_per_s / 1e6);
    add_point_locked("engine (rank 0)", "fused tensors per cycle", x, r.fused_per_cycle);
    if (r.cache_hit_rate >= 0) {
      add_point_locked("engine (rank 0)", "response-cache hit rate", x, r.cache_hit_rate);
    }
  }
}

void JobBoard::update_states_locked() {
  double t = now();
  for (Rank& r : ranks_) {
    if (r.state == "dead" || r.state == "exited" || r.state == "restarting") continue;
    bool stopped = r.process.local && options_.stopped(r.process.pid);
    double idle = t - r.last_progress, silent = t - r.received;
    if (stopped) {
      r.state = "stalled", r.detail = "process stopped (SIGSTOP)";
    } else if (r.have_report && silent >= options_.stall_seconds) {
      r.state = "stalled", r.detail = "no report for " + fixed(silent, 0) + " s";
    } else if (r.have_report && idle >= options_.stall_seconds) {
      r.state = "stalled", r.detail = "no step for " + fixed(idle, 0) + " s";
    } else if (r.have_report) {
      r.state = "live", r.detail.clear();
    }
  }
}

std::string JobBoard::rank_table_locked() const {
  std::string out =
      "<table id=\"ranks\"><tr><th>rank</th><th>host</th><th>pid</th><th>state</th>"
      "<th>step</th><th>steps/s</th><th>samples/s</th><th>compute</th><th>allreduce wait</th>"
      "<th>data</th><th>time split</th><th>memory</th><th>detail</th></tr>";
  for (const Rank& r : ranks_) {
    double total = r.compute + r.wait + r.data;
    auto pct = [&](double v) { return total > 0 ? fixed(100 * v / total, 0) + "%" : "-"; };
    out += "<tr class=\"rank\" data-rank=\"" + std::to_string(r.process.rank) + "\" data-state=\"" +
           r.state + "\" data-step=\"" + fixed(r.last.r.get("steps"), 0) + "\">";
    out += "<td>" + std::to_string(r.process.rank) + "</td><td class=\"l\">" +
           html_escape(r.process.host) + "</td><td>" +
           (r.process.pid > 0 ? std::to_string(r.process.pid) : "-") + "</td><td class=\"l state-" +
           r.state + "\">" + r.state + "</td>";
    out += "<td>" + fixed(r.last.r.get("steps"), 0) + "</td><td>" + fixed(r.steps_per_s, 1) +
           "</td><td>" + fixed(r.samples_per_s, 0) + "</td><td>" + pct(r.compute) + "</td><td>" +
           pct(r.wait) + "</td><td>" + pct(r.data) + "</td><td class=\"l\">" +
           breakdown_bar(r.compute, r.wait, r.data) + "</td><td>" +
           (r.have_report ? mib(r.last.r.get("rss_bytes")) : "-") + "</td><td class=\"l\">" +
           html_escape(r.detail) + "</td></tr>";
  }
  return out + "</table>";
}

std::string JobBoard::charts_locked() const {
  std::string out = "<div class=\"cards\">";
  std::vector<std::string> order = chart_order_;
  // Training curves first: loss, then the other scalars, then the job's figures.
  std::stable_partition(order.begin(), order.end(),
                        [](const std::string& c) { return c == kLoss; });
  if (std::find(order.begin(), order.end(), kLoss) == order.end())
    order.insert(order.begin(), kLoss);
  for (const std::string& name : order) {
    std::vector<Series> series;
    auto it = charts_.find(name);
    if (it != charts_.end()) {
      for (const auto& [s, pts] : it->second) series.push_back(Series{s, pts});
    }
    ChartOptions o;
    o.title = name;
    o.x_label = name.find('/') != std::string::npos || name.find("rank 0") != std::string::npos
                    ? "seconds"
                    : "step";
    out += "<div class=\"card\" data-chart=\"" + html_escape(name) + "\" data-points=\"" +
           std::to_string(it == charts_.end() ? 0 : [&] {
             size_t n = 0;
             for (const auto& [s, pts] : it->second) n += pts.size();
             return n;
           }()) +
           "\">" + svg_line_chart(series, o) + "</div>";
  }
  return out + "</div>";
}

std::string JobBoard::fragment_html() {
  std::lock_guard<std::mutex> lock(mu_);
  update_states_locked();
  double samples = 0;
  for (const Rank& r : ranks_) samples += r.state == "live" ? r.samples_per_s : 0;
  std::string out = "<p id=\"job\" data-job-state=\"" + html_escape(job_state_) + "\"><b>" +
                    html_escape(job_state_) + "</b> &middot; " + std::to_string(ranks_.size()) +
                    " ranks &middot; " + fixed(now() - started_, 0) + " s &middot; " +
                    fixed(samples, 0) + " samples/s in all &middot; <a href=\"timeline.json" +
                    "\" id=\"timeline\" data-keep-query>timeline of the last 30 s</a></p>";
  out += rank_table_locked();
  out += "<h2>Curves</h2>" + charts_locked();
  out += "<h2>Events</h2><div class=\"events\" id=\"events\">";
  if (events_.empty()) out += "none yet";
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) out += html_escape(*it) + "\n";
  return out + "</div>";
}

std::string JobBoard::state_json() {
  std::lock_guard<std::mutex> lock(mu_);
  update_states_locked();
  std::string out = "{\"job\":" + json_string(job_state_) +
                    ",\"restart\":" + std::to_string(restart_) + ",\"ranks\":[";
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    out += std::string(i ? "," : "") + "{\"rank\":" + std::to_string(r.process.rank) +
           ",\"host\":" + json_string(r.process.host) +
           ",\"pid\":" + std::to_string(r.process.pid) + ",\"state\":" + json_string(r.state) +
           ",\"detail\":" + json_string(r.detail) +
           ",\"steps\":" + json_number(r.last.r.get("steps")) +
           ",\"steps_per_s\":" + json_number(r.steps_per_s) +
           ",\"samples_per_s\":" + json_number(r.samples_per_s) +
           ",\"compute_s\":" + json_number(r.compute) + ",\"wait_s\":" + json_number(r.wait) +
           ",\"data_s\":" + json_number(r.data) +
           ",\"rss_bytes\":" + json_number(r.last.r.get("rss_bytes")) + "}";
  }
  out += "],\"charts\":{";
  bool first = true;
  for (const auto& [name, series] : charts_) {
    size_t n = 0;
    for (const auto& [s, pts] : series) n += pts.size();
    out += std::string(first ? "" : ",") + json_string(name) + ":" + std::to_string(n);
    first = false;
  }
  out += "},\"events\":[";
  for (size_t i = 0; i < events_.size(); ++i) {
    out += std::string(i ? "," : "") + json_string(events_[i]);
  }
  return out + "]}";
}

}  // namespace chorus::web
