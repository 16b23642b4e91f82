#include "state_file.h"

#include "chorus/error.h"
#include "optimizer_kernels.h"
#include "util/byte_order.h"

namespace chorus::ps {
namespace {

constexpr uint32_t kStateMagic = 0x46535043;  // bytes "CPSF" read as little-endian
constexpr uint32_t kStateFormat = 1;
constexpr size_t kPrefixBytes = 12;

// A u32 of the fixed prefix (whose size decode_state checks first).
uint32_t read_u32(const std::string& s, size_t at) { return byte_order::load_u32(&s[at]); }

StateHeader parse_header(const std::string& bytes) {
  rendezvous::PayloadReader in(bytes);
  StateHeader h;
  h.part = get_part(in);
  h.config = get_config(in);
  h.version = in.i64();
  uint32_t count = in.u32();
  CHORUS_CHECK_ARG(count == h.part.shards.size(), "ps state file: ", count, " step counters for ",
                   h.part.shards.size(), " shards");
  for (uint32_t i = 0; i < count; ++i) h.steps.push_back(in.i64());
  in.finish();
  for (int64_t step : h.steps) CHORUS_CHECK_ARG(step >= 0, "ps state file: negative step count");
  CHORUS_CHECK_ARG(h.version >= 0, "ps state file: negative version");
  return h;
}

}  // namespace

int64_t state_floats(const PartLayout& part, const OptimizerConfig& optimizer) {
  return part.elements() * (1 + slot_count(optimizer));
}

std::string encode_state_header(const StateHeader& h) {
  rendezvous::PayloadWriter body;
  put_part(body, h.part);
  put_config(body, h.config);
  body.i64(h.version).u32(static_cast<uint32_t>(h.steps.size()));
  for (int64_t step : h.steps) body.i64(step);
  std::string header = body.take();
  std::string out = rendezvous::PayloadWriter()
                        .u32(kStateMagic)
                        .u32(kStateFormat)
                        .u32(static_cast<uint32_t>(header.size()))
                        .take();
  return out + header;
}

uint64_t state_file_size(const PartLayout& part, const PsConfig& config) {
  StateHeader h;
  h.part = part;
  h.config = config;
  h.steps.assign(part.shards.size(), 0);
  return encode_state_header(h).size() +
         static_cast<uint64_t>(state_floats(part, config.optimizer)) * sizeof(float);
}

StateHeader decode_state(const std::string& file, size_t& floats_at) {
  CHORUS_CHECK_ARG(file.size() >= kPrefixBytes, "ps state file: truncated (", file.size(),
                   " bytes)");
  CHORUS_CHECK_ARG(read_u32(file, 0) == kStateMagic,
                   "ps state file: bad magic (not a ps state file)");
  CHORUS_CHECK_ARG(read_u32(file, 4) == kStateFormat, "ps state file: format ", read_u32(file, 4),
                   " is not supported (this build reads ", kStateFormat, ")");
  uint32_t header_bytes = read_u32(file, 8);
  CHORUS_CHECK_ARG(header_bytes <= file.size() - kPrefixBytes, "ps state file: truncated header");
  StateHeader h;
  try {
    h = parse_header(file.substr(kPrefixBytes, header_bytes));
  } catch (const IoError& e) {  // PayloadReader: a length that runs past the end
    CHORUS_THROW(InvalidArgument, "ps state file: malformed header: ", e.what());
  }
  floats_at = kPrefixBytes + header_bytes;
  uint64_t want = static_cast<uint64_t>(state_floats(h.part, h.config.optimizer)) * sizeof(float);
  CHORUS_CHECK_ARG(file.size() - floats_at == want, "ps state file: ", file.size() - floats_at,
                   " bytes of values and slots, the layout needs ", want);
  return h;
}

}  // namespace chorus::ps
