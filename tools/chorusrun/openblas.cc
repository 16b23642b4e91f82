// The pure part of openblas.h: CPU flags, generic cores, the decision.
#include "openblas.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

namespace chorus::run {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::set<std::string> first_flags_line(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (line.rfind("flags", 0) != 0 || colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

}  // namespace

CpuFeatures parse_cpu_features(const std::string& cpuinfo) {
  std::set<std::string> f = first_flags_line(cpuinfo);
  auto all = [&f](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&f](const char* n) { return f.count(n) > 0; });
  };
  CpuFeatures cpu;
  cpu.avx2_fma = all({"avx2", "fma"});
  cpu.avx512 = cpu.avx2_fma && all({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"});
  return cpu;
}

bool is_generic_openblas_core(const std::string& core) {
  // OpenBLAS's x86-64 cores without AVX2 kernels (driver/others/dynamic.c). A name not
  // listed, including any newer core, is taken as OpenBLAS knowing the CPU.
  static const std::set<std::string> generic = {
      "prescott",   "core2",       "penryn",       "dunnington", "nehalem",    "sandybridge",
      "atom",       "opteron",     "opteron_sse3", "barcelona",  "bobcat",     "bulldozer",
      "piledriver", "steamroller", "nano",         "katmai",     "coppermine", "northwood",
      "banias",     "athlon",      "unknown"};
  return generic.count(lower(core)) > 0;
}

std::optional<std::string> choose_openblas_coretype(const CpuFeatures& cpu, const std::string& core,
                                                    const char* user_value) {
  if (user_value != nullptr || core.empty() || !is_generic_openblas_core(core)) return std::nullopt;
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return std::nullopt;
}

}  // namespace chorus::run
