#include "util/background_thread.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "util/log.h"

namespace chorus {

void become_background_thread(const char* name) noexcept {
  try {
    char shortened[16] = {};
    std::strncpy(shortened, name, sizeof(shortened) - 1);
    int err = pthread_setname_np(pthread_self(), shortened);
    if (err != 0) {
      log_line(LogLevel::kDebug, "util",
               std::string("cannot name thread ") + name + ": " + std::strerror(err));
    }
    sched_param param{};
    param.sched_priority = 0;
    // pid 0: the calling thread only (Linux applies the policy per thread).
    if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) {
      log_line(LogLevel::kDebug, "util",
               std::string("cannot make ") + name + " SCHED_BATCH: " + std::strerror(errno));
    }
  } catch (...) {
    // Logging failed (out of memory): the thread still works as it is.
  }
}

}  // namespace chorus
