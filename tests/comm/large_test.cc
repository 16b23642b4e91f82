// More than 2^31 elements through allreduce: byte offsets and counts must be 64-bit all the
// way down. Two ranks, 2.1 GB each (in place), so about 5 GB of memory with scratch.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "comm_harness.h"

namespace chorus::comm::testing {
namespace {

TEST(LargeAllreduce, MoreThanTwoToThe31Uint8) {
  const size_t count = (size_t{1} << 31) + 4099;
  Group group(Transport::kTcp, 2);
  std::vector<std::vector<uint8_t>> buf(2);
  for (int r = 0; r < 2; ++r) {
    buf[r].resize(count);
    for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<uint8_t>(((i * 7) & 0x7f) + r);
  }
  group.run([&](int r, Communicator& comm) {
    comm.allreduce(buf[r].data(), buf[r].data(), count, DataType::kUInt8, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < count; i += (i < count - 5000 ? 4093 : 1)) {
      uint8_t want = static_cast<uint8_t>(2 * ((i * 7) & 0x7f) + 1);
      ASSERT_EQ(buf[r][i], want) << "rank " << r << " element " << i;
    }
  }
}

}  // namespace
}  // namespace chorus::comm::testing
