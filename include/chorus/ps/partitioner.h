// How the variables of a model are laid out on the ps tasks.
//
//   round_robin      whole variables, variable i on ps (i mod num_ps) (TF's default
//                    placement without a partitioner).
//   size_balanced    variables larger than max_shard_elements are split into near-equal
//                    contiguous shards (TF's MaxSizePartitioner), then shards are placed
//                    largest first on the least-loaded ps (ties: lowest index), so the
//                    bytes per ps differ by at most one shard.
//
// Every element of every variable is in exactly one shard; shards of a variable are listed
// in offset order. Deterministic: every task computing the same partition gets the same one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::ps {

struct VariableSpec {
  std::string name;
  int64_t numel = 0;  // float32 elements; REQUIRES > 0
};

struct Shard {
  int variable = 0;  // index into the VariableSpec list
  int64_t offset = 0;
  int64_t length = 0;
  int ps = 0;  // the ps task that holds it
};

// REQUIRES num_ps >= 1, non-empty unique names (InvalidArgument otherwise).
std::vector<Shard> round_robin(const std::vector<VariableSpec>& variables, int num_ps);
// max_shard_elements <= 0: total / (4 * num_ps), at least 16384 elements.
std::vector<Shard> size_balanced(const std::vector<VariableSpec>& variables, int num_ps,
                                 int64_t max_shard_elements = 0);

// Elements held by each ps.
std::vector<int64_t> load_per_ps(const std::vector<Shard>& shards, int num_ps);

}  // namespace chorus::ps
