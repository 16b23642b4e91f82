#include "bench_common.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "chorus/error.h"

namespace chorus::bench {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

int to_int(const std::string& key, const std::string& value) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  CHORUS_CHECK_ARG(!value.empty() && *end == '\0' && v >= 0, key, " wants a number >= 0, got '",
                   value, "'");
  return static_cast<int>(v);
}

}  // namespace

BenchArgs parse_args(int argc, char** argv) {
  BenchArgs a;
  CHORUS_CHECK_ARG(argc >= 2, "usage: ps_vs_ring_bench ring|ps-server|ps-worker [options]");
  a.mode = argv[1];
  for (int i = 2; i < argc; i += 2) {
    std::string key = argv[i];
    CHORUS_CHECK_ARG(i + 1 < argc, key, " needs a value");
    std::string value = argv[i + 1];
    if (key == "--model-mb") {
      a.model_bytes = int64_t{to_int(key, value)} << 20;
    } else if (key == "--steps") {
      a.steps = to_int(key, value);
    } else if (key == "--warmup") {
      a.warmup = to_int(key, value);
    } else if (key == "--listen") {
      a.listen = value;
    } else if (key == "--ps") {
      a.ps = split_commas(value);
    } else if (key == "--worker") {
      a.worker = to_int(key, value);
    } else if (key == "--num-workers") {
      a.num_workers = to_int(key, value);
    } else if (key == "--done-dir") {
      a.done_dir = value;
    } else {
      CHORUS_THROW(InvalidArgument, "unknown option ", key);
    }
  }
  CHORUS_CHECK_ARG(a.steps >= 1 && a.model_bytes >= 4096, "need --steps >= 1, --model-mb >= 1");
  return a;
}

StepTimes summarize(std::vector<double> seconds) {
  StepTimes t;
  if (seconds.empty()) return t;
  std::sort(seconds.begin(), seconds.end());
  size_t n = seconds.size();
  t.median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  t.min = seconds.front();
  t.max = seconds.back();
  return t;
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void print_result(const std::string& fields, const StepTimes& t, double wall_start) {
  std::printf("RESULT %s median_s=%.6f min_s=%.6f max_s=%.6f cpu_s=%.3f wall_s=%.3f\n",
              fields.c_str(), t.median, t.min, t.max, process_cpu_seconds(),
              wall_seconds() - wall_start);
  std::fflush(stdout);
}

}  // namespace chorus::bench
