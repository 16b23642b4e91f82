// The text of a rank's report and its parsing by the launcher (internal).
//
// A report is lines "name value" with a decimal number as value, except "host", whose
// value is a word. Scalars are "scalar.<name> value", counters "counter.<name> value".
// Names are [A-Za-z0-9_./-], at most 64 bytes; a report is at most kMaxReportBytes.
// parse_report never trusts what it reads: a malformed line is skipped, unknown names are
// kept (a newer rank), and nothing beyond the limits is kept.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace chorus::report {

constexpr size_t kMaxReportBytes = 16384;
constexpr size_t kMaxNameBytes = 64;
constexpr size_t kMaxEntries = 128;

struct ParsedReport {
  std::string host;
  std::map<std::string, double> values;  // every "name value" line but host
  double get(const std::string& name, double fallback = 0) const;
};

ParsedReport parse_report(const std::string& text);
// Keeps [A-Za-z0-9_./-] and cuts at kMaxNameBytes ("" when nothing is left).
std::string clean_name(const std::string& name);
// The store key of a rank's report.
std::string report_key(int restart, int rank);

}  // namespace chorus::report
