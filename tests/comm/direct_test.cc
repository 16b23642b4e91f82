// The direct single-copy allreduce (each rank reduces its part from every rank's buffers
// and writes it into every rank's) over shm, ranks as threads of this process (which may
// always read and write its own memory): results against the reference on every rank,
// identical across ranks, in and out of place, over parts, at 2, 3 and 5 ranks; different
// calls are IoErrors on every rank with no output touched; and it runs only where the plan
// says. Ranks as processes, killed or stopped in the middle of it: fault_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "comm_harness.h"
#include "parts.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr char kGuard = '\x5a';

class DirectTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { group_ = std::make_unique<Group>(Transport::kShm, GetParam()); }
  int p() const { return GetParam(); }

  std::vector<std::vector<char>> random_inputs(DataType t, ReduceOp op, size_t count,
                                               uint64_t seed) const {
    std::vector<std::vector<char>> in(p());
    for (int r = 0; r < p(); ++r) {
      Random rng(seed * 131 + r);
      in[r].resize(count * dtype_size(t));
      fill_random(t, op, in[r].data(), count, p(), rng);
    }
    return in;
  }

  std::unique_ptr<Group> group_;
};

TEST_P(DirectTest, EveryRankGetsTheReductionAndTheSameBits) {
  // Plus one odd element; below the streaming size, so that out of place runs it too.
  uint64_t seed = 1;
  for (const ReduceCase& c : mixed_reduce_cases()) {
    for (bool in_place : {false, true}) {
      size_t count = c.bytes / dtype_size(c.type) + 1, bytes = count * dtype_size(c.type);
      SCOPED_TRACE(std::string(dtype_name(c.type)) + " " + reduce_op_name(c.op) + " count " +
                   std::to_string(count) + (in_place ? " in place" : ""));
      auto inputs = random_inputs(c.type, c.op, count, seed++);
      std::vector<std::vector<char>> in = inputs, out(p());
      for (int r = 0; r < p(); ++r) {
        out[r] = in_place ? in[r] : std::vector<char>(bytes, kGuard);
        out[r].push_back(kGuard);  // past the end
      }
      std::vector<std::string> plans(p());
      group_->run([&](int r, Communicator& comm) {
        comm.allreduce(in_place ? out[r].data() : in[r].data(), out[r].data(), count, c.type, c.op);
        plans[r] = comm.last_plan();
      });
      for (int r = 0; r < p(); ++r) {
        EXPECT_EQ(plans[r], "direct (single-copy)") << "rank " << r;
        EXPECT_EQ(out[r].back(), kGuard) << "rank " << r << " wrote past the end";
        out[r].pop_back();
        if (!in_place) {
          EXPECT_EQ(in[r], inputs[r]) << "rank " << r << "'s input changed";
        }
        ASSERT_EQ(out[r], out[0]) << "rank " << r << " differs from rank 0";
      }
      expect_reduced(c.type, c.op, inputs, out[0].data(), 0, count);
    }
  }
}

// Parts (some in place, some empty, one odd) give the bits of the allreduce of their
// concatenation: every element is reduced by the rank that owns its offset either way.
TEST_P(DirectTest, PartsAreTheConcatenationBitForBit) {
  size_t total = 0;
  for (size_t c : mixed_part_counts()) total += c;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    SCOPED_TRACE(reduce_op_name(op));
    auto inputs = random_inputs(DataType::kFloat32, op, total, 7 + static_cast<int>(op));
    std::vector<std::vector<char>> flat = inputs;
    group_->run([&](int r, Communicator& comm) {
      comm.allreduce(flat[r].data(), flat[r].data(), total, DataType::kFloat32, op);
      EXPECT_STREQ(comm.last_plan(), "direct (single-copy)");
    });
    expect_parts_equal_flat(*group_, inputs, flat, op);
    for (int r = 0; r < p(); ++r) EXPECT_STREQ((*group_)[r].last_plan(), "direct (single-copy)");
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, DirectTest, ::testing::Values(2, 3, 5),
                         [](const auto& info) { return std::to_string(info.param); });

// Ranks given different calls would write past each other's buffers or mix data: each
// rank's call is compared with every other's before anything is written, so every rank
// throws an IoError and no output holds a byte of the call.
TEST(DirectMismatch, DifferentCallsAreIoErrorsOnEveryRankAndNothingIsWritten) {
  struct Case {
    size_t count[3];
    DataType type[3];
    size_t parts[3];  // the call cut into this many equal parts
    const char* expected;
  };
  const size_t n = kMiB / 2;  // 2 MiB of float32
  const DataType f32 = DataType::kFloat32;
  const Case cases[] = {
      {{n, n, n + 4}, {f32, f32, f32}, {1, 1, 1}, "(different calls on different ranks?)"},
      {{n, n, n}, {f32, DataType::kInt32, f32}, {1, 1, 1}, "runs another kind of call"},
      {{n, n, n}, {f32, f32, f32}, {1, 1, 2}, "(different calls on different ranks?)"},
      {{n, n, n}, {f32, f32, f32}, {2, 4, 2}, "(different calls on different ranks?)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    Group group(Transport::kShm, 3);
    std::vector<std::vector<float>> in(3), out(3);
    std::string errors[3];
    group.run([&](int r, Communicator& comm) {
      in[r].assign(c.count[r] + 4, 1.0f);
      out[r].assign(c.count[r] + 4, -7.0f);
      std::vector<BufferPart> parts;
      size_t each = c.count[r] / c.parts[r];
      for (size_t i = 0; i < c.parts[r]; ++i) {
        parts.push_back({in[r].data() + i * each, out[r].data() + i * each, each});
      }
      try {
        comm.allreduce(parts, c.type[r], ReduceOp::kSum);
      } catch (const IoError& e) {
        errors[r] = e.what();
      }
    });
    int told = 0;
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(group[r].single_copy()) << "rank " << r;
      const bool reason = errors[r].find(c.expected) != std::string::npos;
      told += reason;
      EXPECT_TRUE(reason || errors[r].find("aborted") != std::string::npos)
          << "rank " << r << ": " << errors[r];
      for (float v : out[r]) ASSERT_EQ(v, -7.0f) << "rank " << r << "'s output was written";
    }
    EXPECT_GE(told, 1);  // the first to see it aborts the links: others may learn only that
  }
}

// From 1 MiB where ranks may read each other: the direct allreduce, except out of place
// from the streaming size (the streaming ring writes outputs faster there); nothing below
// 1 MiB, with single copy off, or when another algorithm is asked for.
TEST(DirectChoice, WhereThePlanPutsIt) {
  auto plans_of = [](const CommunicatorOptions& o, size_t count, bool in_place) {
    Group group(Transport::kShm, 2, o);
    std::vector<std::string> plans(2);
    group.run([&](int r, Communicator& comm) {
      std::vector<float> in(count, static_cast<float>(r + 1)), out(count);
      comm.allreduce(in.data(), in_place ? in.data() : out.data(), count, DataType::kFloat32,
                     ReduceOp::kSum);
      EXPECT_EQ((in_place ? in : out)[count - 1], 3.0f) << "rank " << r;
      plans[r] = comm.last_plan();
    });
    EXPECT_EQ(plans[0], plans[1]);
    return plans[0];
  };
  CommunicatorOptions o = Group::default_options();
  o.shm_placement = 0;
  EXPECT_EQ(plans_of(o, kMiB / 4, false), "direct (single-copy)");
  EXPECT_EQ(plans_of(o, kMiB / 4 - 1, true), "halving-doubling");
  EXPECT_EQ(plans_of(o, o.shm_streaming_bytes / 4, true), "direct (single-copy)");
  EXPECT_EQ(plans_of(o, o.shm_streaming_bytes / 4, false), "ring (streaming)");
  CommunicatorOptions off = o;
  off.shm_single_copy = false;
  EXPECT_EQ(plans_of(off, kMiB / 4, true), "halving-doubling");
  CommunicatorOptions ring = o;
  ring.allreduce_algorithm = AllreduceAlgorithm::kRing;
  EXPECT_EQ(plans_of(ring, kMiB / 4, true), "ring (single-copy)");
}

}  // namespace
}  // namespace chorus::comm::testing
