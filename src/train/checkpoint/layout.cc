#include "train/checkpoint/layout.h"

#include <unistd.h>

#include <limits>

#include "train/checkpoint/file_io.h"
#include "train/checkpoint/manifest.h"

namespace chorus::ckpt {
namespace {

constexpr size_t kMaxPrefixBytes = 100;
constexpr size_t kRandomHexChars = 16;
constexpr uint64_t kMaxStep = std::numeric_limits<int64_t>::max();

std::string unique_suffix() { return std::to_string(::getpid()) + "-" + random_hex(); }

bool is_lower_hex(std::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// "<pid>-<16 hex>" exactly.
bool is_unique_suffix(std::string_view text) {
  size_t dash = text.find('-');
  if (dash == std::string_view::npos) return false;
  std::string_view hex = text.substr(dash + 1);
  return parse_decimal(text.substr(0, dash), std::numeric_limits<uint32_t>::max()) &&
         hex.size() == kRandomHexChars && is_lower_hex(hex);
}

// "<step>-<pid>-<16 hex>": the step, or nullopt.
std::optional<int64_t> parse_step_and_suffix(std::string_view text) {
  size_t dash = text.find('-');
  if (dash == std::string_view::npos || !is_unique_suffix(text.substr(dash + 1))) {
    return std::nullopt;
  }
  auto step = parse_decimal(text.substr(0, dash), kMaxStep);
  if (!step) return std::nullopt;
  return static_cast<int64_t>(*step);
}

bool consume(std::string_view& text, std::string_view head) {
  if (text.substr(0, head.size()) != head) return false;
  text.remove_prefix(head.size());
  return true;
}

}  // namespace

bool valid_prefix(std::string_view prefix) {
  // valid_file_name first: it rejects the empty prefix (and "MANIFEST").
  return valid_file_name(prefix) && prefix.size() <= kMaxPrefixBytes && prefix[0] != '.';
}

std::string committed_name(const std::string& prefix, int64_t step) {
  return prefix + "-" + std::to_string(step);
}

std::string temp_name(const std::string& prefix, int64_t step) {
  return "." + prefix + "-tmp-" + std::to_string(step) + "-" + unique_suffix();
}

std::string old_name(const std::string& prefix, int64_t step) {
  return "." + prefix + "-old-" + std::to_string(step) + "-" + unique_suffix();
}

std::string deleting_name(const std::string& prefix) {
  return "." + prefix + "-del-" + unique_suffix();
}

std::optional<ParsedName> parse_name(const std::string& prefix, std::string_view name) {
  std::string_view rest = name;
  if (consume(rest, prefix + "-")) {
    auto step = parse_decimal(rest, kMaxStep);
    if (!step) return std::nullopt;
    return ParsedName{Kind::kCommitted, static_cast<int64_t>(*step)};
  }
  if (!consume(rest, "." + prefix + "-")) return std::nullopt;
  if (consume(rest, "del-")) {
    if (!is_unique_suffix(rest)) return std::nullopt;
    return ParsedName{Kind::kDeleting, -1};
  }
  Kind kind;
  if (consume(rest, "tmp-")) {
    kind = Kind::kTemp;
  } else if (consume(rest, "old-")) {
    kind = Kind::kOld;
  } else {
    return std::nullopt;
  }
  auto step = parse_step_and_suffix(rest);
  if (!step) return std::nullopt;
  return ParsedName{kind, *step};
}

}  // namespace chorus::ckpt
