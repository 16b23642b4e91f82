#include "binding.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <tuple>

#include "options.h"

namespace chorus::run {
namespace {

// A number from sysfs (topology/core_id and the like); -1 when missing or unreadable.
int read_number(const std::string& path) {
  std::ifstream in(path);
  int value = -1;
  if (!(in >> value)) return -1;
  return value;
}

}  // namespace

BindTo parse_bind_to(const std::string& text) {
  if (text == "auto") return BindTo::kAuto;
  if (text == "core") return BindTo::kCore;
  if (text == "none") return BindTo::kNone;
  throw UsageError("--bind-to must be auto, core or none, got '" + text + "'");
}

const char* bind_to_name(BindTo bind) {
  switch (bind) {
    case BindTo::kCore:
      return "core";
    case BindTo::kNone:
      return "none";
    case BindTo::kAuto:
      break;
  }
  return "auto";
}

std::vector<int> order_by_core(std::vector<int> cpus, const std::string& sysfs) {
  using Key = std::tuple<int, int, int>;  // package, core, cpu
  std::vector<Key> keys;
  for (int cpu : cpus) {
    std::string dir = sysfs + "/cpu" + std::to_string(cpu) + "/topology/";
    keys.emplace_back(read_number(dir + "physical_package_id"), read_number(dir + "core_id"), cpu);
  }
  std::sort(keys.begin(), keys.end());
  for (size_t i = 0; i < keys.size(); ++i) cpus[i] = std::get<2>(keys[i]);
  return cpus;
}

std::vector<int> allowed_cpus(const std::string& sysfs) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return order_by_core(std::move(cpus), sysfs);
}

std::vector<int> cpu_share(const std::vector<int>& cpus, int local_rank, int local_size,
                           BindTo bind) {
  const int n = static_cast<int>(cpus.size());
  if (bind == BindTo::kNone || local_rank < 0 || local_rank >= local_size || n == 0) return {};
  if (local_size > n) {
    if (bind == BindTo::kAuto) return {};
    throw UsageError("--bind-to core: " + std::to_string(local_size) + " workers on this host " +
                     "but only " + std::to_string(n) + " cpus to bind them to (" +
                     cpu_list_text(cpus) + "); use --bind-to none or fewer workers");
  }
  // Run i covers [i * n / size, (i + 1) * n / size): contiguous, sizes differ by at most one.
  const long begin = static_cast<long>(local_rank) * n / local_size;
  const long end = static_cast<long>(local_rank + 1) * n / local_size;
  return std::vector<int>(cpus.begin() + begin, cpus.begin() + end);
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  std::string text;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(sorted[i]);
    if (j > i) text += '-' + std::to_string(sorted[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace chorus::run
