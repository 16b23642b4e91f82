// The checkpoint file of one ps ("ps-<index>", docs/ps.md), little-endian:
//   magic u32 ("CPSF") | format u32 (1) | header_bytes u32 | header | floats
// header: layout part, config (put_part / put_config), i64 version, u32 count + i64 step
// per shard. floats: per shard in layout order, its values, then its optimizer slots
// (slot_count() arrays of the shard's length). The size is fully determined by the header,
// so a truncated or padded file is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout.h"

namespace chorus::ps {

struct StateHeader {
  PartLayout part;
  PsConfig config;
  int64_t version = 0;
  std::vector<int64_t> steps;  // one per shard
};

// Float32 elements after the header: values and slots of every shard.
int64_t state_floats(const PartLayout& part, const OptimizerConfig& optimizer);
// The file up to its floats.
std::string encode_state_header(const StateHeader& header);
// The exact size of the file of a ps holding `part` with `config`. Only the layout part
// varies in size (the config, version and steps are fixed-size fields), so a client that
// knows the layout knows the size of a save before it arrives.
uint64_t state_file_size(const PartLayout& part, const PsConfig& config);
// Parses and checks a whole file; `floats_at` is the byte offset of the first float.
// InvalidArgument naming the problem (bad magic, truncated, sizes that do not add up).
StateHeader decode_state(const std::string& file, size_t& floats_at);

}  // namespace chorus::ps
