// The hierarchical allreduce (comm/hierarchical.cc) with ranks placed on several "hosts" of
// this machine by CHORUS_HOST_ID: links within a host are shared memory and across hosts
// TCP, as on a cluster. Results against the reference for every op and a sample of types,
// counts smaller than the ranks of a host, in place, parts, and uneven hosts (flat plan).
#include <gtest/gtest.h>

#include <string>

#include "comm_harness.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

// Ranks on the hosts given rank by rank (CHORUS_HOST_ID "host<h>"), through the store.
std::unique_ptr<Group> placed_group(const std::vector<int>& host_of_rank, int hierarchical) {
  CommunicatorOptions o = Group::default_options();
  o.hierarchical_allreduce = hierarchical;
  return std::make_unique<Group>(static_cast<int>(host_of_rank.size()), o,
                                 [&](int r, CommunicatorOptions& mine) {
                                   mine.host_id = "host" + std::to_string(host_of_rank[r]);
                                 });
}

// `hosts` x `per_host` ranks, rank r on host r / per_host.
std::vector<int> uniform(int hosts, int per_host) {
  std::vector<int> h;
  for (int r = 0; r < hosts * per_host; ++r) h.push_back(r / per_host);
  return h;
}

// One allreduce of `count` elements on every rank, checked against the reference; returns
// the plan rank 0 ran.
std::string check_allreduce(Group& g, DataType t, ReduceOp op, size_t count, bool in_place,
                            uint64_t seed) {
  int p = g.size();
  size_t es = dtype_size(t);
  std::vector<std::vector<char>> inputs(p, std::vector<char>(count * es));
  std::vector<std::vector<char>> outputs(p, std::vector<char>(count * es));
  for (int r = 0; r < p; ++r) {
    Random rng(seed * 131 + r);
    fill_random(t, op, inputs[r].data(), count, p, rng);
    if (in_place) outputs[r] = inputs[r];
  }
  std::vector<std::string> plans(p);
  g.run([&](int r, Communicator& c) {
    const void* send = in_place ? outputs[r].data() : inputs[r].data();
    c.allreduce(send, outputs[r].data(), count, t, op);
    plans[r] = c.last_plan();
  });
  for (int r = 0; r < p; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " " + dtype_name(t) + " " + reduce_op_name(op) +
                 " count " + std::to_string(count));
    expect_reduced(t, op, inputs, outputs[r].data(), 0, count);
    EXPECT_EQ(plans[r], plans[0]);
  }
  return plans[0];
}

struct Shape {
  int hosts, per_host;
};

class Hierarchical : public ::testing::TestWithParam<Shape> {};

TEST_P(Hierarchical, EveryOpMatchesTheReference) {
  auto g = placed_group(uniform(GetParam().hosts, GetParam().per_host), 1);
  uint64_t seed = 1;
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16,
                     DataType::kInt8}) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      for (size_t count : {size_t{1}, size_t{3}, size_t{1000}, size_t{70001}}) {
        bool in_place = (seed % 2) == 0;
        EXPECT_EQ(check_allreduce(*g, t, static_cast<ReduceOp>(o), count, in_place, seed++),
                  "hierarchical");
      }
    }
  }
}

// Large enough for the ring in the cross-host step (slices over 16 MiB: 2 hosts keep
// halving-doubling up to there).
TEST_P(Hierarchical, LargeBuffersTakeTheRingAcrossHosts) {
  auto g = placed_group(uniform(GetParam().hosts, GetParam().per_host), 1);
  size_t count = (size_t{17} << 20) / 4 * GetParam().per_host + 7;
  EXPECT_EQ(check_allreduce(*g, DataType::kFloat32, ReduceOp::kAverage, count, true, 7),
            "hierarchical");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Hierarchical,
                         ::testing::Values(Shape{2, 2}, Shape{3, 2}, Shape{2, 3}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::to_string(info.param.hosts) + "hosts_x" +
                                  std::to_string(info.param.per_host);
                         });

TEST(HierarchicalPlan, AutoFrom1MiBAndPartsAreStaged) {
  auto g = placed_group(uniform(2, 2), -1);
  EXPECT_EQ(check_allreduce(*g, DataType::kFloat32, ReduceOp::kSum, 1000, false, 3),
            "recursive doubling");
  EXPECT_EQ(
      check_allreduce(*g, DataType::kFloat32, ReduceOp::kSum, kHierarchicalMinBytes / 4, false, 4),
      "hierarchical");
  // Several buffers: staged through one, then the same plan.
  std::vector<std::vector<float>> a(4, std::vector<float>(300000)), b(4, std::vector<float>(77));
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < a[r].size(); ++i) a[r][i] = static_cast<float>(r + i % 7);
    for (size_t i = 0; i < b[r].size(); ++i) b[r][i] = static_cast<float>(2 * r + i % 3);
  }
  std::vector<std::string> plans(4);
  g->run([&](int r, Communicator& c) {
    c.allreduce({{a[r].data(), a[r].data(), a[r].size()}, {b[r].data(), b[r].data(), b[r].size()}},
                DataType::kFloat32, ReduceOp::kSum);
    plans[r] = c.last_plan();
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(plans[r], "hierarchical");
    for (size_t i = 0; i < a[r].size(); i += 997) ASSERT_EQ(a[r][i], 6.0f + 4 * (i % 7)) << i;
    for (size_t i = 0; i < b[r].size(); ++i) ASSERT_EQ(b[r][i], 12.0f + 4 * (i % 3)) << i;
  }
}

// Two ranks on one host and one on another: no hierarchy to use, even when asked.
TEST(HierarchicalPlan, UnevenHostsRunFlat) {
  auto g = placed_group({0, 0, 1}, 1);
  EXPECT_EQ(check_allreduce(*g, DataType::kFloat32, ReduceOp::kSum, size_t{2} << 20, false, 5),
            "ring");
}

}  // namespace
}  // namespace chorus::comm::testing
