// How far apart two cores are: the round trip of one cache line between two threads pinned
// to two CPUs (build/bench/core_latency [CPU_A CPU_B] [SECONDS]). Prints the median round
// trip in nanoseconds of 0.1-second samples, one line: "core_latency: cpu 0 <-> cpu 1:
// 131 ns (min 129, max 133, 10 samples)".
//
// Why: on a VM the host may move the vCPUs between nearby cores and distant ones (another
// chiplet or socket) while a job runs. Every shared-memory transfer between ranks pays that
// distance, so an allreduce's speed can change fourfold with no change in the program
// (docs/algorithms.md, "Two placements"). compare_allreduce.sh records this figure with
// every run so that results can be told apart by placement.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

alignas(64) std::atomic<long> g_ball{0};
std::atomic<bool> g_stop{false};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Returns the ball incremented each time it comes back odd, until told to stop.
void partner(int cpu) {
  pin(cpu);  // checked by main
  long seen = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    long v = g_ball.load(std::memory_order_acquire);
    if (v != seen && (v & 1)) {
      g_ball.store(v + 1, std::memory_order_release);
      seen = v + 1;
    }
  }
}

// Nanoseconds per round trip over `span`.
double sample(std::chrono::duration<double> span) {
  long rounds = 0;
  const auto start = Clock::now();
  while (Clock::now() - start < span) {
    for (int i = 0; i < 256; ++i) {
      const long v = g_ball.load(std::memory_order_relaxed) + 1;  // even -> odd
      g_ball.store(v, std::memory_order_release);
      while (g_ball.load(std::memory_order_acquire) != v + 1) {
      }
    }
    rounds += 256;
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / rounds;
}

bool allowed(int cpu) {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
}

// The first two CPUs this process may run on.
bool default_cpus(int* a, int* b) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return false;
  int found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; ++c) {
    if (CPU_ISSET(c, &set)) (found++ == 0 ? *a : *b) = c;
  }
  return found == 2;
}

// A whole decimal number in [0, 4096), or -1.
int parse_cpu(const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return (end != text && *end == '\0' && v >= 0 && v < 4096) ? static_cast<int>(v) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  int a = 0, b = 1;
  double seconds = 1.0;
  char* end = nullptr;
  if (argc >= 4) seconds = std::strtod(argv[3], &end);
  const bool bad_seconds = argc >= 4 && (*end != '\0' || !(seconds > 0 && seconds <= 600));
  if (argc >= 3) {
    a = parse_cpu(argv[1]);
    b = parse_cpu(argv[2]);
  }
  if (argc == 2 || argc > 4 || a < 0 || b < 0 || a == b || bad_seconds) {
    std::fprintf(stderr, "usage: core_latency [CPU_A CPU_B (distinct)] [SECONDS (0-600]]\n");
    return 2;
  }
  if (argc < 3 && !default_cpus(&a, &b)) {
    std::fprintf(stderr, "core_latency: needs two CPUs to run on\n");
    return 2;
  }
  for (int cpu : {a, b}) {
    if (!allowed(cpu)) {
      std::fprintf(stderr, "core_latency: this process may not run on cpu %d\n", cpu);
      return 2;
    }
  }
  pin(a);
  std::thread other(partner, b);
  sample(std::chrono::milliseconds(20));  // warm-up: both threads running, the line cached
  std::vector<double> ns;
  const int samples = std::max(1, static_cast<int>(seconds * 10));
  for (int i = 0; i < samples; ++i) ns.push_back(sample(std::chrono::milliseconds(100)));
  g_stop = true;
  other.join();
  std::sort(ns.begin(), ns.end());
  std::printf("core_latency: cpu %d <-> cpu %d: %.0f ns (min %.0f, max %.0f, %zu samples)\n", a, b,
              ns[ns.size() / 2], ns.front(), ns.back(), ns.size());
  return 0;
}
