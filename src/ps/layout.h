// What one parameter server holds — the model's variables, its own shards, the optimizer
// and the update mode — with the checks and the encoding shared by the server, the client
// and the state files (docs/wire_format.md, "Parameter server"). Every decoder checks
// counts, lengths and ranges before anything is sized from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/ps/client.h"
#include "rendezvous/frame.h"

namespace chorus::ps {

constexpr size_t kMaxVariables = 1 << 20;
constexpr size_t kMaxShardsPerPs = 1 << 20;
constexpr size_t kMaxNameBytes = 4096;
constexpr int kMaxPs = 1 << 16;
constexpr int kMaxWorkers = 1 << 16;

// CHORUS_PS_MAX_ELEMENTS (default 2^31): the float32 elements one ps may hold. Checked by
// the client before create() sends anything and by the server before it allocates.
int64_t max_elements_per_ps();

struct PsConfig {
  OptimizerConfig optimizer;
  UpdateMode mode = UpdateMode::kAsync;
  int num_workers = 1;
};

struct PartLayout {
  int ps_index = 0;
  int num_ps = 1;
  std::vector<VariableSpec> variables;  // the whole model's, the same on every ps
  std::vector<Shard> shards;            // this ps's, in the order their floats travel
  int64_t elements() const;             // REQUIRES: checked (get_part, checked_elements)
};

// The part's elements, summed with overflow checks (a numel may be up to 2^63 - 1, so a
// plain sum of a peer's lengths can wrap): InvalidArgument past max_elements_per_ps().
int64_t checked_elements(const PartLayout& part);

// InvalidArgument unless names are non-empty, unique and at most kMaxNameBytes, every
// numel > 0, and there are at most kMaxVariables.
void check_variables(const std::vector<VariableSpec>& variables);
// InvalidArgument unless every element of every variable is in exactly one shard, each on
// a ps in [0, num_ps), and no ps holds more than max_elements_per_ps().
void check_layout(const std::vector<VariableSpec>& variables, const std::vector<Shard>& shards,
                  int num_ps);
void check_config(const PsConfig& config);
// The shards of `layout` on ps `ps`, in layout order.
PartLayout part_of(const ModelLayout& layout, int ps, int num_ps);
bool same_layout(const PartLayout& a, const PartLayout& b);

// IoError on a malformed payload, InvalidArgument on contents that break the checks above.
void put_part(rendezvous::PayloadWriter& out, const PartLayout& part);
PartLayout get_part(rendezvous::PayloadReader& in);
void put_config(rendezvous::PayloadWriter& out, const PsConfig& config);
PsConfig get_config(rendezvous::PayloadReader& in);

}  // namespace chorus::ps
