// What every rank runs for one named tensor: computed identically on every rank from the
// same requests (the message table, or the response cache), so the plans agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"

namespace chorus::engine {

struct Response {
  Request agreed;                   // the metadata every rank runs with
  std::vector<int64_t> first_dims;  // allgather: rows from each rank (0 for joined ranks)
  std::vector<int64_t> splits;      // alltoall: size x size, [src * size + dst] rows
  int contributors = 0;             // ranks that submitted it (others joined)
  int divisor = 0;                  // ranks an average divides by (JoinMode)
  std::string error;                // non-empty: every rank's op fails with InvalidArgument

  const std::string& name() const { return agreed.name; }
};

// Builds the response for `name` from each rank's request (nullopt: the rank joined),
// checking that they agree and that `mode` lets the op run with ranks joined. Mismatches
// become Response::error, naming the ranks.
Response make_response(const std::string& name, const std::vector<std::optional<Request>>& per_rank,
                       JoinMode mode = JoinMode::kContribute);

}  // namespace chorus::engine
