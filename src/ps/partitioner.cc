// Placement of variables on ps tasks. size_balanced is TF's MaxSizePartitioner followed by
// LPT scheduling (largest shard first onto the least-loaded ps): when a shard lands on the
// ps that ends up fullest, that ps was the emptiest, so max load - min load <= that shard.
#include "chorus/ps/partitioner.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "chorus/error.h"

namespace chorus::ps {
namespace {

constexpr int64_t kMinDefaultShard = 16384;

void check_inputs(const std::vector<VariableSpec>& variables, int num_ps) {
  CHORUS_CHECK_ARG(num_ps >= 1, "partitioner: num_ps must be >= 1, got ", num_ps);
  std::set<std::string> names;
  for (size_t i = 0; i < variables.size(); ++i) {
    const VariableSpec& v = variables[i];
    CHORUS_CHECK_ARG(!v.name.empty(), "partitioner: variable ", i, " has an empty name");
    CHORUS_CHECK_ARG(v.numel > 0, "partitioner: variable '", v.name, "' has ", v.numel,
                     " elements (must be > 0)");
    CHORUS_CHECK_ARG(names.insert(v.name).second, "partitioner: variable name '", v.name,
                     "' is used twice");
  }
}

// Splits each variable into ceil(numel / max) contiguous shards whose sizes differ by <= 1.
std::vector<Shard> split(const std::vector<VariableSpec>& variables, int64_t max_elements) {
  std::vector<Shard> shards;
  for (size_t i = 0; i < variables.size(); ++i) {
    int64_t n = variables[i].numel;
    int64_t parts = (n + max_elements - 1) / max_elements;
    int64_t base = n / parts, extra = n % parts, offset = 0;
    for (int64_t p = 0; p < parts; ++p) {
      int64_t length = base + (p < extra ? 1 : 0);
      shards.push_back(Shard{static_cast<int>(i), offset, length, 0});
      offset += length;
    }
  }
  return shards;
}

bool by_variable_offset(const Shard& a, const Shard& b) {
  return a.variable != b.variable ? a.variable < b.variable : a.offset < b.offset;
}

}  // namespace

std::vector<Shard> round_robin(const std::vector<VariableSpec>& variables, int num_ps) {
  check_inputs(variables, num_ps);
  std::vector<Shard> shards;
  for (size_t i = 0; i < variables.size(); ++i) {
    shards.push_back(Shard{static_cast<int>(i), 0, variables[i].numel,
                           static_cast<int>(i % static_cast<size_t>(num_ps))});
  }
  return shards;
}

std::vector<Shard> size_balanced(const std::vector<VariableSpec>& variables, int num_ps,
                                 int64_t max_shard_elements) {
  check_inputs(variables, num_ps);
  if (max_shard_elements <= 0) {
    int64_t total = 0;
    for (const auto& v : variables) total += v.numel;
    max_shard_elements = std::max<int64_t>(total / (4 * int64_t{num_ps}), kMinDefaultShard);
  }
  std::vector<Shard> shards = split(variables, max_shard_elements);
  std::vector<size_t> order(shards.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; equal sizes in (variable, offset) order so every task agrees.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return shards[a].length > shards[b].length; });
  std::vector<int64_t> load(static_cast<size_t>(num_ps), 0);
  for (size_t i : order) {
    auto least = std::min_element(load.begin(), load.end());  // first minimum: lowest index
    shards[i].ps = static_cast<int>(least - load.begin());
    *least += shards[i].length;
  }
  std::sort(shards.begin(), shards.end(), by_variable_offset);
  return shards;
}

std::vector<int64_t> load_per_ps(const std::vector<Shard>& shards, int num_ps) {
  CHORUS_CHECK_ARG(num_ps >= 1, "load_per_ps: num_ps must be >= 1, got ", num_ps);
  std::vector<int64_t> load(static_cast<size_t>(num_ps), 0);
  for (const Shard& s : shards) {
    CHORUS_CHECK_ARG(s.ps >= 0 && s.ps < num_ps, "load_per_ps: shard of variable ", s.variable,
                     " is on ps ", s.ps, ", outside 0..", num_ps - 1);
    load[static_cast<size_t>(s.ps)] += s.length;
  }
  return load;
}

}  // namespace chorus::ps
