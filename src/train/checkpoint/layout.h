// Names of the directories a CheckpointManager keeps under its directory:
//   <prefix>-<step>                    committed
//   .<prefix>-tmp-<step>-<pid>-<hex>   a save being written (flock()ed by its writer), or
//                                      garbage left by a dead one
//   .<prefix>-old-<step>-<pid>-<hex>   a committed checkpoint moved aside to be replaced
//   .<prefix>-del-<pid>-<hex>          garbage being deleted
// Leading dots keep the uncommitted ones out of the committed namespace for any prefix.
// Parsing is strict (canonical numbers, 16 hex digits), so a name of another prefix
// ("ckpt" vs "ckpt-tmp") is never mistaken for one of ours.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chorus::ckpt {

enum class Kind { kCommitted, kTemp, kOld, kDeleting };

struct ParsedName {
  Kind kind;
  int64_t step = -1;  // -1 for kDeleting
};

// [A-Za-z0-9._-]+, not starting with '.', at most 100 characters.
bool valid_prefix(std::string_view prefix);

std::string committed_name(const std::string& prefix, int64_t step);
// A fresh, unique name: pid and 8 random bytes.
std::string temp_name(const std::string& prefix, int64_t step);
std::string old_name(const std::string& prefix, int64_t step);
std::string deleting_name(const std::string& prefix);

// What `name` is for this prefix; nullopt when it is not one of ours.
std::optional<ParsedName> parse_name(const std::string& prefix, std::string_view name);

}  // namespace chorus::ckpt
