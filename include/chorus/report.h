// Progress reports of a rank to its launcher, for `chorusrun --dashboard` (docs/dashboard.md).
//
// chorusrun --dashboard sets CHORUS_REPORT_SECONDS in every rank's environment. Then the
// first call below starts one background thread in the process, which every that many
// seconds (at most 10 times a second) writes this rank's report to the job's store (the
// authenticated store of CHORUS_STORE_ADDR, a connection of its own) under
// `chorus/report/<restart>/<rank>`. Without the variable every call returns at once and no
// thread, connection or memory is taken.
//
// The training loop's cost is what the calls below cost: a mutex that only the reporting
// thread also takes, once per period, and a few additions. The report holds totals (steps,
// samples, seconds), so a lost or late report loses nothing: the launcher takes rates from
// the difference of two reports.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chorus::report {

// Whether reports are being sent (CHORUS_REPORT_SECONDS > 0 and CHORUS_STORE_ADDR set).
bool enabled();

// One training step of this rank: the samples it processed and where its time went —
// computing, waiting for the collectives (the gradients' allreduce), loading the data — and
// the bytes its collectives reduced.
struct Step {
  int64_t samples = 0;
  double compute_seconds = 0;
  double wait_seconds = 0;
  double data_seconds = 0;
  uint64_t collective_bytes = 0;
  uint64_t collective_tensors = 0;  // tensors handed to the collectives (e.g. gradients)
};
void step(const Step& s);

// The latest value of a training scalar ("loss", "accuracy"); at most 16 names are kept.
void scalar(const std::string& name, double value);

// Counters read by the reporting thread at each report (e.g. an engine's statistics):
// name -> value. The source is called until the returned object is destroyed, which waits
// for a report in progress, so the source may refer to objects that outlive that object.
using CounterSource = std::function<std::vector<std::pair<std::string, double>>()>;
class SourceToken {
 public:
  explicit SourceToken(int id) : id_(id) {}
  ~SourceToken();
  SourceToken(const SourceToken&) = delete;
  SourceToken& operator=(const SourceToken&) = delete;

 private:
  int id_;
};
std::unique_ptr<SourceToken> add_counters(CounterSource source);

}  // namespace chorus::report
namespace chorus {
class Engine;
}  // namespace chorus
namespace chorus::report {
// add_counters for an engine's statistics (EngineStats: cycles, cache hits, collectives,
// fused tensors, stall warnings) as counter.engine_<name>. nullptr when reports are off.
std::unique_ptr<SourceToken> watch_engine(const Engine& engine);

// The text of this rank's next report (for tests; also what the launcher parses):
// lines "name value", "scalar.<name> value", "counter.<name> value".
std::string current_report();

// Sends a last report now and stops the thread (also at exit).
void flush_and_stop();

}  // namespace chorus::report
