#include "timeline_tail.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "chorus/error.h"

namespace chorus::web {
namespace {

// The event object on a line: "{...}" without the separators around it; "" if none.
std::string event_of(const std::string& line) {
  size_t a = line.find('{'), b = line.rfind('}');
  if (a == std::string::npos || b == std::string::npos || b < a) return "";
  return line.substr(a, b - a + 1);
}

bool timestamp(const std::string& event, double& ts) {
  size_t at = event.find("\"ts\":");
  if (at == std::string::npos) return false;
  char* end = nullptr;
  ts = std::strtod(event.c_str() + at + 5, &end);
  return end != event.c_str() + at + 5;
}

}  // namespace

std::string timeline_tail(const std::string& path, double seconds, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) CHORUS_THROW(IoError, "timeline: cannot open ", path, ": ", std::strerror(errno));
  std::streamoff size = f.tellg();
  std::streamoff from = size > static_cast<std::streamoff>(max_bytes)
                            ? size - static_cast<std::streamoff>(max_bytes)
                            : 0;
  f.seekg(from);
  std::string text(static_cast<size_t>(size - from), '\0');
  f.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  std::vector<std::string> meta;
  std::vector<std::pair<double, std::string>> spans;
  double latest = 0;
  size_t start = from > 0 ? text.find('\n') + 1 : 0;  // a cut first line is dropped
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // the line being written
    std::string ev = event_of(text.substr(start, end - start));
    start = end + 1;
    if (ev.empty()) continue;
    double ts = 0;
    if (ev.find("\"ph\":\"M\"") != std::string::npos) {
      meta.push_back(ev);
    } else if (timestamp(ev, ts)) {
      latest = std::max(latest, ts);
      spans.emplace_back(ts, ev);
    }
  }
  std::string out = "[\n";
  bool first = true;
  auto add = [&](const std::string& ev) {
    out += (first ? "" : ",\n") + ev;
    first = false;
  };
  for (const auto& m : meta) add(m);
  for (const auto& [ts, ev] : spans) {
    if (ts >= latest - seconds * 1e6) add(ev);
  }
  return out + "\n]\n";
}

}  // namespace chorus::web
