#include "report/report_format.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace chorus::report {

double ParsedReport::get(const std::string& name, double fallback) const {
  auto it = values.find(name);
  return it == values.end() ? fallback : it->second;
}

std::string clean_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (out.size() >= kMaxNameBytes) break;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == '-';
    if (ok) out.push_back(c);
  }
  return out;
}

ParsedReport parse_report(const std::string& text) {
  ParsedReport r;
  std::istringstream in(text.substr(0, kMaxReportBytes));
  std::string line;
  while (std::getline(in, line) && r.values.size() < kMaxEntries) {
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0) continue;
    std::string name = line.substr(0, sp), value = line.substr(sp + 1);
    if (clean_name(name) != name) continue;
    if (name == "host") {
      r.host = clean_name(value);
      continue;
    }
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v)) continue;
    r.values[name] = v;
  }
  return r;
}

std::string report_key(int restart, int rank) {
  return "chorus/report/" + std::to_string(restart) + "/" + std::to_string(rank);
}

}  // namespace chorus::report
