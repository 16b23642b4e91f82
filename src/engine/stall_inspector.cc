#include "engine/stall_inspector.h"

#include <algorithm>
#include <sstream>

#include "chorus/error.h"
#include "util/log.h"

namespace chorus::engine {
namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << ']';
  return out.str();
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string describe(const MessageTable::Waiting& w) {
  return "tensor '" + w.name + "' (" + op_type_name(w.op) + ") submitted by ranks " +
         ranks_text(w.submitted) + ", missing ranks " + ranks_text(w.missing);
}

bool StallInspector::check(const std::vector<MessageTable::Waiting>& waiting, Counters& counters) {
  std::set<std::string> still;
  std::ostringstream report;
  int fresh = 0;
  bool shutdown = false;
  for (const auto& w : waiting) {
    if (options_.stall_shutdown.count() > 0 && w.age >= options_.stall_shutdown) shutdown = true;
    if (options_.stall_check.count() <= 0 || w.age < options_.stall_check) continue;
    still.insert(w.name);
    if (warned_.count(w.name)) continue;
    report << (fresh++ ? "; " : "") << describe(w) << " (waiting " << seconds(w.age) << " s)";
  }
  warned_ = std::move(still);
  if (fresh > 0) {
    counters.stall_warnings++;
    CHORUS_LOG(kWarning, "engine")
        << "stall: " << fresh << " tensor(s) submitted by some ranks only for more than "
        << seconds(options_.stall_check) << " s (CHORUS_STALL_CHECK_SECONDS): " << report.str();
  }
  return shutdown;
}

Clock::duration StallInspector::cache_wait_limit() const {
  auto check = options_.stall_check, stop = options_.stall_shutdown;
  std::chrono::milliseconds limit{0};
  if (check.count() > 0) limit = check;
  if (stop.count() > 0 && (limit.count() == 0 || stop < limit)) limit = stop;
  if (limit.count() == 0) return Clock::duration::max();
  return limit / 2;
}

std::string StallInspector::shutdown_message(
    const std::vector<MessageTable::Waiting>& waiting) const {
  std::ostringstream out;
  out << "engine stopped by the stall inspector: tensors waited more than "
      << seconds(options_.stall_shutdown) << " s (CHORUS_STALL_SHUTDOWN_SECONDS) for ranks: ";
  for (size_t i = 0; i < waiting.size(); ++i) out << (i ? "; " : "") << describe(waiting[i]);
  if (waiting.empty()) out << "(none left)";
  return detail::make_message(__FILE__, __LINE__, out.str());
}

}  // namespace chorus::engine
