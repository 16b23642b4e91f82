// A multi-buffer allreduce (Communicator::allreduce(parts)) against the allreduce of the
// parts' concatenation: the layout the tests use and the bitwise comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm_harness.h"

namespace chorus::comm::testing {

// Element counts of parts of every size, including none, and one odd.
inline const std::vector<size_t>& mixed_part_counts() {
  static const std::vector<size_t> counts = {300, 0, 1 << 18, 5, 0, 700001, 1, 1 << 17, 64};
  return counts;
}

// Runs the float32 allreduce of `inputs` (every rank's concatenated parts) on `group` as
// the parts of mixed_part_counts(), every third in place and the others into a separate
// output, and expects each rank's results to equal `flat` (the same rank's allreduce of
// the whole concatenation) bit for bit.
inline void expect_parts_equal_flat(Group& group, const std::vector<std::vector<char>>& inputs,
                                    const std::vector<std::vector<char>>& flat, ReduceOp op) {
  const std::vector<size_t>& counts = mixed_part_counts();
  int p = group.size();
  std::vector<std::vector<char>> in = inputs, out(p, std::vector<char>(inputs[0].size(), 0x5a));
  auto result_at = [&](int r, size_t i) { return (i % 3 == 0 ? in[r] : out[r]).data(); };
  group.run([&](int r, Communicator& comm) {
    std::vector<BufferPart> parts;
    size_t at = 0;
    for (size_t i = 0; i < counts.size(); at += counts[i++]) {
      parts.push_back({in[r].data() + at * 4, result_at(r, i) + at * 4, counts[i]});
    }
    comm.allreduce(parts, DataType::kFloat32, op);
  });
  for (int r = 0; r < p; ++r) {
    size_t at = 0;
    for (size_t i = 0; i < counts.size(); at += counts[i++]) {
      ASSERT_EQ(std::memcmp(result_at(r, i) + at * 4, flat[r].data() + at * 4, counts[i] * 4), 0)
          << "rank " << r << ", part " << i;
    }
  }
}

}  // namespace chorus::comm::testing
