// The last seconds of an engine timeline (docs/engine.md: a Chrome-trace JSON array written
// one event per line, possibly still being written) as a complete JSON array: every
// metadata event (the rows' names) and the complete events that begin within `seconds` of
// the latest one. Lines that are cut off or not events are skipped. Reads at most the last
// `max_bytes` of the file. IoError when the file cannot be read.
#pragma once

#include <cstddef>
#include <string>

namespace chorus::web {

std::string timeline_tail(const std::string& path, double seconds,
                          size_t max_bytes = size_t{256} << 20);

}  // namespace chorus::web
