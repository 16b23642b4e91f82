// The streaming ring (large allreduces over shared memory: chunk-major units, results
// written past the cache and, as they are made, into the ring to the right): its results
// must be bit for bit those of the plain byte-stream ring, which reduces in the same order,
// and those of an independent reference — for every data type, sums and averages, in and
// out of place, with segments of several uneven units, and with rings so small that results
// often find no room and take the plain path; likewise on cores far apart, where its bytes
// pass through memory. It must be chosen only where it applies.
// A rank killed or stopped in the middle of it is in fault_test.cc (shm_streaming).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm_harness.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// `far`: the cores count as far apart (the ring streams through memory), else as near.
std::unique_ptr<Group> ring_group(Transport transport, int size, size_t streaming_bytes,
                                  size_t ring_bytes = 0, bool far = false) {
  CommunicatorOptions o = Group::default_options();
  o.shm_single_copy = false;
  o.shm_streaming_bytes = streaming_bytes;
  o.shm_ring_bytes = ring_bytes;
  o.shm_placement = far ? 1 : 0;
  o.allreduce_algorithm = AllreduceAlgorithm::kRing;
  return std::make_unique<Group>(transport, size, o);
}

// Runs the allreduce of `inputs` on `group`, out of place or in place; returns the outputs
// and checks that no rank wrote past its buffer or into its input.
std::vector<std::vector<char>> allreduce_on(Group& group,
                                            const std::vector<std::vector<char>>& inputs,
                                            size_t count, DataType type, ReduceOp op,
                                            bool in_place) {
  int p = group.size();
  std::vector<std::vector<char>> in = inputs, out(p);
  for (int r = 0; r < p; ++r) {
    out[r] = in_place ? in[r] : std::vector<char>(count * dtype_size(type), '\x5a');
    out[r].push_back('\x5a');  // a guard byte past the end
  }
  group.run([&](int r, Communicator& comm) {
    comm.allreduce(in_place ? out[r].data() : in[r].data(), out[r].data(), count, type, op);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(out[r].back(), '\x5a') << "rank " << r << " wrote past the end";
    out[r].pop_back();
    if (!in_place) {
      EXPECT_EQ(in[r], inputs[r]) << "rank " << r << " input modified";
    }
  }
  return out;
}

struct Case {
  DataType type;
  ReduceOp op;
  size_t bytes;  // rounded down to whole elements, plus one odd element
};
// 5 MiB + 1 element: several 1 MiB units per segment, of uneven sizes.
const Case kCases[] = {{DataType::kFloat32, ReduceOp::kSum, 5 * kMiB},
                       {DataType::kFloat32, ReduceOp::kAverage, 3 * kMiB},
                       {DataType::kFloat64, ReduceOp::kMax, 3 * kMiB},
                       {DataType::kInt32, ReduceOp::kAverage, 2 * kMiB},
                       {DataType::kUInt8, ReduceOp::kSum, 2 * kMiB},
                       {DataType::kFloat16, ReduceOp::kSum, 2 * kMiB},
                       {DataType::kBFloat16, ReduceOp::kMin, kMiB},
                       {DataType::kInt64, ReduceOp::kProduct, kMiB}};

class StreamingTest : public ::testing::TestWithParam<int> {
 protected:
  int p() const { return GetParam(); }

  void expect_same_as_plain(Group& streaming, Group& plain, const Case& c, bool in_place,
                            uint64_t seed) {
    size_t count = c.bytes / dtype_size(c.type) + 1;
    SCOPED_TRACE(std::string(dtype_name(c.type)) + " " + reduce_op_name(c.op) + " count " +
                 std::to_string(count) + (in_place ? " in place" : ""));
    std::vector<std::vector<char>> inputs(p());
    for (int r = 0; r < p(); ++r) {
      Random rng(seed * 977 + r);
      inputs[r].resize(count * dtype_size(c.type));
      fill_random(c.type, c.op, inputs[r].data(), count, p(), rng);
    }
    auto streamed = allreduce_on(streaming, inputs, count, c.type, c.op, in_place);
    auto reference = allreduce_on(plain, inputs, count, c.type, c.op, in_place);
    for (int r = 0; r < p(); ++r) ASSERT_EQ(streamed[r], reference[r]) << "rank " << r;
    expect_reduced(c.type, c.op, inputs, streamed[0].data(), 0, count);
  }
};

TEST_P(StreamingTest, AllreduceIsBitForBitThePlainRing) {
  auto streaming = ring_group(Transport::kShm, p(), kMiB);
  auto plain = ring_group(Transport::kShm, p(), 0);
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    for (bool in_place : {false, true})
      expect_same_as_plain(*streaming, *plain, c, in_place, seed++);
  }
}

// 16 KiB rings, far smaller than a unit: the ring to the right is mostly full, results
// are written to the caller's buffer and sent from there, and units wrap around the ring
// at every offset (uint8 counts put the stream at odd positions).
TEST_P(StreamingTest, TinyRingsTakeThePlainPathAndStayExact) {
  auto streaming = ring_group(Transport::kShm, p(), kMiB, 16 << 10);
  auto plain = ring_group(Transport::kShm, p(), 0, 16 << 10);
  uint64_t seed = 100;
  for (const Case& c : {kCases[0], kCases[1], kCases[4]}) {
    expect_same_as_plain(*streaming, *plain, c, false, seed++);
  }
}

// Cores far apart: the same ring with every byte for the neighbour written past the cache
// (from 3 ranks also the results it forwards as they arrive) — the same bits, with room in
// the rings and without.
TEST_P(StreamingTest, FarCoresStreamTheSameBits) {
  auto plain = ring_group(Transport::kShm, p(), 0);
  uint64_t seed = 200;
  for (size_t ring_bytes : {size_t{0}, size_t{16} << 10}) {
    auto far = ring_group(Transport::kShm, p(), kMiB, ring_bytes, /*far=*/true);
    for (const Case& c : kCases) {
      expect_same_as_plain(*far, *plain, c, seed % 2 == 0, seed);
      ++seed;
      ASSERT_STREQ((*far)[1].last_plan(), "ring (streaming, far)");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, StreamingTest, ::testing::Values(2, 3, 4));

// Below the threshold, over TCP, or with 0 it is not chosen: the plain ring runs, which the
// communicator names in error messages. A broken call shows the name: here, a timeout
// (one rank calls, its peer does not).
std::string algorithm_named(Transport transport, size_t streaming_bytes, size_t count) {
  CommunicatorOptions o = Group::default_options();
  o.shm_streaming_bytes = streaming_bytes;
  o.shm_single_copy = false;  // else the plan first asks the peers (direct_test.cc)
  o.shm_placement = 0;        // auto: the lone rank 0 would send its choice first, not time out
  o.timeout = std::chrono::milliseconds(300);
  Group group(transport, 2, o);
  std::vector<float> buf(count, 1.0f);
  try {
    group[0].allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
  } catch (const TimeoutError& e) {
    return e.what();
  }
  return "no timeout";
}

TEST(StreamingChoice, OnlyLargeAllreducesOverSharedMemoryStream) {
  const size_t big = 4 * kMiB / 4;  // 4 MiB of float32
  EXPECT_NE(algorithm_named(Transport::kShm, kMiB, big).find("ring (streaming)"),
            std::string::npos);
  EXPECT_EQ(algorithm_named(Transport::kShm, 8 * kMiB, big).find("streaming"), std::string::npos);
  EXPECT_EQ(algorithm_named(Transport::kShm, 0, big).find("streaming"), std::string::npos);
  EXPECT_EQ(algorithm_named(Transport::kTcp, kMiB, big).find("streaming"), std::string::npos);
}

// CHORUS_SHM_PLACEMENT=auto on 2 ranks: rank 0 chooses near or far from how fast each ran
// (comm/placement.h) and tells rank 1 at every call, so both run the same mode in every call
// (the plan each names); the first four calls alternate near and far, and every result is
// exact.
TEST(StreamingChoice, AutoPlacementRunsBothModesAndTheRanksAgreeOnEach) {
  CommunicatorOptions o = Group::default_options();
  o.shm_single_copy = false;
  o.shm_streaming_bytes = kMiB;
  o.shm_placement = -1;
  o.allreduce_algorithm = AllreduceAlgorithm::kRing;
  Group group(Transport::kShm, 2, o);
  const size_t count = 2 * kMiB / 4;
  std::vector<std::string> plans[2];
  for (int call = 0; call < 12; ++call) {
    std::vector<std::vector<char>> inputs(2), outputs(2);
    group.run([&](int r, Communicator& comm) {
      Random rng(call * 31 + r);
      inputs[r].resize(count * 4);
      fill_random(DataType::kFloat32, ReduceOp::kSum, inputs[r].data(), count, 2, rng);
      outputs[r].resize(count * 4);
      comm.allreduce(inputs[r].data(), outputs[r].data(), count, DataType::kFloat32,
                     ReduceOp::kSum);
      plans[r].push_back(comm.last_plan());
    });
    expect_reduced(DataType::kFloat32, ReduceOp::kSum, inputs, outputs[0].data(), 0, count);
    ASSERT_EQ(outputs[0], outputs[1]) << "call " << call;
  }
  EXPECT_EQ(plans[0], plans[1]);
  for (int call = 0; call < 4; ++call) {
    EXPECT_EQ(plans[0][call], call % 2 ? "ring (streaming, far)" : "ring (streaming)") << call;
  }
}

}  // namespace
}  // namespace chorus::comm::testing
