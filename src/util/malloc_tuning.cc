#include "util/malloc_tuning.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "util/env.h"

namespace chorus {
namespace {

constexpr int kMmapThreshold = 32 << 20;  // DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
constexpr int kTrimThreshold = 256 << 20;

// Why the user's own choice wins, or "".
std::string users_choice() {
  if (env_int_or("CHORUS_MALLOC_TUNING", 1) == 0) return "CHORUS_MALLOC_TUNING=0";
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    return "GLIBC_TUNABLES sets glibc.malloc";
  }
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_MMAP_MAX_"}) {
    if (std::getenv(name) != nullptr) return std::string(name) + " is set";
  }
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload != nullptr && *preload != '\0') return "LD_PRELOAD may bring another allocator";
  return "";
}

MallocTuning apply() {
  MallocTuning t;
  t.why = users_choice();
  if (!t.why.empty()) return t;
  // mallopt returns 1 on success; the threshold also stops glibc's dynamic adjustment.
  if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1 ||
      mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1) {
    t.why = "mallopt refused the thresholds";
    return t;
  }
  t.applied = true;
  t.why = "malloc: heap blocks up to 32 MiB, trim above 256 MiB free";
  return t;
}

}  // namespace

MallocTuning tune_malloc_for_training() {
  static std::once_flag once;
  static MallocTuning result;
  std::call_once(once, [] { result = apply(); });
  return result;
}

}  // namespace chorus
