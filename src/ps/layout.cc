#include "layout.h"

#include <algorithm>
#include <set>

#include "chorus/error.h"
#include "optimizer_kernels.h"
#include "util/env.h"

namespace chorus::ps {
namespace {

using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;

// Shards of one variable sorted by offset must tile [0, numel) with no gap or overlap.
void check_tiling(const std::vector<VariableSpec>& variables, std::vector<Shard> shards,
                  bool complete) {
  std::sort(shards.begin(), shards.end(), [](const Shard& a, const Shard& b) {
    return a.variable != b.variable ? a.variable < b.variable : a.offset < b.offset;
  });
  std::vector<int64_t> covered(variables.size(), 0);
  for (const Shard& s : shards) {
    CHORUS_CHECK_ARG(s.variable >= 0 && static_cast<size_t>(s.variable) < variables.size(),
                     "layout: shard names variable ", s.variable, " of ", variables.size());
    const VariableSpec& v = variables[static_cast<size_t>(s.variable)];
    CHORUS_CHECK_ARG(s.length > 0 && s.offset >= 0 && s.offset <= v.numel - s.length,
                     "layout: shard [", s.offset, ", +", s.length, ") is outside variable '",
                     v.name, "' of ", v.numel, " elements");
    int64_t& end = covered[static_cast<size_t>(s.variable)];
    CHORUS_CHECK_ARG(s.offset >= end, "layout: shards of variable '", v.name, "' overlap at ",
                     s.offset);
    CHORUS_CHECK_ARG(!complete || s.offset == end, "layout: elements [", end, ", ", s.offset,
                     ") of variable '", v.name, "' are in no shard");
    end = s.offset + s.length;  // at most numel: no overflow
  }
  for (size_t i = 0; complete && i < variables.size(); ++i) {
    CHORUS_CHECK_ARG(covered[i] == variables[i].numel, "layout: elements [", covered[i], ", ",
                     variables[i].numel, ") of variable '", variables[i].name, "' are in no shard");
  }
}

// total += length when length >= 0 and the sum neither overflows nor passes `limit`;
// false otherwise (`total` is then meaningless).
bool add_elements(int64_t& total, int64_t length, int64_t limit) {
  return length >= 0 && !__builtin_add_overflow(total, length, &total) && total <= limit;
}

}  // namespace

int64_t max_elements_per_ps() {
  int64_t limit = env_int_or("CHORUS_PS_MAX_ELEMENTS", int64_t{1} << 31);
  CHORUS_CHECK_ARG(limit > 0 && limit <= (int64_t{1} << 40),
                   "CHORUS_PS_MAX_ELEMENTS must be in "
                   "1..2^40, got ",
                   limit);
  return limit;
}

int64_t PartLayout::elements() const {
  int64_t n = 0;
  for (const Shard& s : shards) n += s.length;
  return n;
}

int64_t checked_elements(const PartLayout& part) {
  const int64_t limit = max_elements_per_ps();
  int64_t total = 0;
  for (const Shard& s : part.shards) {
    CHORUS_CHECK_ARG(add_elements(total, s.length, limit), "layout: ps ", part.ps_index,
                     " would hold more than CHORUS_PS_MAX_ELEMENTS=", limit, " elements");
  }
  return total;
}

void check_variables(const std::vector<VariableSpec>& variables) {
  CHORUS_CHECK_ARG(variables.size() <= kMaxVariables, "layout: ", variables.size(),
                   " variables is over the limit of ", kMaxVariables);
  std::set<std::string> names;
  for (size_t i = 0; i < variables.size(); ++i) {
    const VariableSpec& v = variables[i];
    CHORUS_CHECK_ARG(!v.name.empty() && v.name.size() <= kMaxNameBytes, "layout: variable ", i,
                     " needs a name of 1..", kMaxNameBytes, " bytes");
    CHORUS_CHECK_ARG(v.numel > 0, "layout: variable '", v.name, "' has ", v.numel, " elements");
    CHORUS_CHECK_ARG(names.insert(v.name).second, "layout: variable name '", v.name,
                     "' is used twice");
  }
}

void check_layout(const std::vector<VariableSpec>& variables, const std::vector<Shard>& shards,
                  int num_ps) {
  CHORUS_CHECK_ARG(num_ps >= 1 && num_ps <= kMaxPs, "layout: ", num_ps, " ps tasks");
  check_variables(variables);
  std::vector<int64_t> load(static_cast<size_t>(num_ps), 0);
  for (const Shard& s : shards) {
    CHORUS_CHECK_ARG(s.ps >= 0 && s.ps < num_ps, "layout: a shard of variable ", s.variable,
                     " is on ps ", s.ps, ", outside 0..", num_ps - 1);
  }
  check_tiling(variables, shards, true);
  const int64_t limit = max_elements_per_ps();
  for (const Shard& s : shards) {
    CHORUS_CHECK_ARG(add_elements(load[static_cast<size_t>(s.ps)], s.length, limit), "layout: ps ",
                     s.ps, " would hold more than CHORUS_PS_MAX_ELEMENTS=", limit, " elements");
  }
}

void check_config(const PsConfig& config) {
  check_optimizer(config.optimizer);
  CHORUS_CHECK_ARG(config.mode == UpdateMode::kAsync || config.mode == UpdateMode::kSync ||
                       config.mode == UpdateMode::kBoundedStaleness,
                   "unknown update mode ", static_cast<int>(config.mode));
  CHORUS_CHECK_ARG(config.num_workers >= 1 && config.num_workers <= kMaxWorkers,
                   "num_workers must be in 1..", kMaxWorkers, ", got ", config.num_workers);
}

PartLayout part_of(const ModelLayout& layout, int ps, int num_ps) {
  PartLayout part;
  part.ps_index = ps;
  part.num_ps = num_ps;
  part.variables = layout.variables;
  for (const Shard& s : layout.shards) {
    if (s.ps == ps) part.shards.push_back(s);
  }
  return part;
}

bool same_layout(const PartLayout& a, const PartLayout& b) {
  auto same_var = [](const VariableSpec& x, const VariableSpec& y) {
    return x.name == y.name && x.numel == y.numel;
  };
  auto same_shard = [](const Shard& x, const Shard& y) {
    return x.variable == y.variable && x.offset == y.offset && x.length == y.length && x.ps == y.ps;
  };
  return a.ps_index == b.ps_index && a.num_ps == b.num_ps &&
         std::equal(a.variables.begin(), a.variables.end(), b.variables.begin(), b.variables.end(),
                    same_var) &&
         std::equal(a.shards.begin(), a.shards.end(), b.shards.begin(), b.shards.end(), same_shard);
}

void put_part(PayloadWriter& out, const PartLayout& part) {
  out.u32(static_cast<uint32_t>(part.ps_index)).u32(static_cast<uint32_t>(part.num_ps));
  out.u32(static_cast<uint32_t>(part.variables.size()));
  for (const auto& v : part.variables) out.str(v.name).i64(v.numel);
  out.u32(static_cast<uint32_t>(part.shards.size()));
  for (const auto& s : part.shards)
    out.u32(static_cast<uint32_t>(s.variable)).i64(s.offset).i64(s.length);
}

// Lists are read element by element without reserving, so a hostile count fails on the
// payload's end, not in an allocation.
PartLayout get_part(PayloadReader& in) {
  PartLayout part;
  part.ps_index = static_cast<int>(in.u32());
  part.num_ps = static_cast<int>(in.u32());
  CHORUS_CHECK_ARG(part.num_ps >= 1 && part.num_ps <= kMaxPs && part.ps_index >= 0 &&
                       part.ps_index < part.num_ps,
                   "layout: ps ", part.ps_index, " of ", part.num_ps);
  uint32_t nvars = in.u32();
  CHORUS_CHECK_ARG(nvars <= kMaxVariables, "layout: ", nvars, " variables is over the limit");
  for (uint32_t i = 0; i < nvars; ++i) {
    std::string name = in.str();
    part.variables.push_back(VariableSpec{std::move(name), in.i64()});
  }
  check_variables(part.variables);
  uint32_t nshards = in.u32();
  CHORUS_CHECK_ARG(nshards <= kMaxShardsPerPs, "layout: ", nshards, " shards is over the limit");
  for (uint32_t i = 0; i < nshards; ++i) {
    int variable = static_cast<int>(in.u32());
    int64_t offset = in.i64();
    part.shards.push_back(Shard{variable, offset, in.i64(), part.ps_index});
  }
  check_tiling(part.variables, part.shards, false);
  checked_elements(part);
  return part;
}

void put_config(PayloadWriter& out, const PsConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  out.u8(static_cast<uint8_t>(c.mode)).u32(static_cast<uint32_t>(c.num_workers));
  out.u8(static_cast<uint8_t>(o.kind)).u8(o.nesterov ? 1 : 0);
  for (double v : {o.learning_rate, o.momentum, o.weight_decay, o.beta1, o.beta2, o.eps})
    out.f64(v);
}

PsConfig get_config(PayloadReader& in) {
  PsConfig c;
  OptimizerConfig& o = c.optimizer;
  c.mode = static_cast<UpdateMode>(in.u8());
  c.num_workers = static_cast<int>(std::min<uint32_t>(in.u32(), INT32_MAX));
  o.kind = static_cast<OptimizerConfig::Kind>(in.u8());
  o.nesterov = in.u8() != 0;
  for (double* v : {&o.learning_rate, &o.momentum, &o.weight_decay, &o.beta1, &o.beta2, &o.eps}) {
    *v = in.f64();
  }
  check_config(c);
  return c;
}

}  // namespace chorus::ps
