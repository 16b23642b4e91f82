// Known data for the verified run of each collective, and the check of its result.
//
// Rank r's element i is value(r, i), a small integer (1..17) exact in every supported
// dtype, so sums over ranks are exact and the expected result is computed locally.
#pragma once

#include <cstddef>
#include <string>

#include "backend.h"
#include "chorus/dtype.h"

namespace chorus::bench {

// Whether the bench can fill and check `type` (float32, float64, int32, int64).
bool verifiable(DataType type);

// Element counts of the send and recv buffers of `op` with `count` as in backend.h.
size_t send_elements(Op op, size_t count, int ranks);
size_t recv_elements(Op op, size_t count, int ranks);

// Fills send and recv for the verified run of `op` on `rank`. recv gets a copy of send's
// own contribution where an in-place backend reads it (allreduce), a poison value elsewhere.
void fill_inputs(Op op, void* send, void* recv, size_t count, DataType type, int rank, int ranks);

// Checks recv after the verified run. Returns "" when correct, else a description of the
// first mismatch.
std::string check_result(Op op, const void* recv, size_t count, DataType type, int rank, int ranks);

}  // namespace chorus::bench
