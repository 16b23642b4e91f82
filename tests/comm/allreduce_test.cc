// Allreduce over transport x world size, with every count x dtype x op x algorithm checked
// against an independent reference on random data drawn per case.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "comm_harness.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

class AllreduceTest : public ::testing::TestWithParam<GroupParam> {
 protected:
  void SetUp() override { group_ = std::make_unique<Group>(GetParam().transport, GetParam().size); }
  std::unique_ptr<Group> group_;
};

constexpr size_t kBigCount = (size_t{1} << 20) + 3;

struct Case {
  DataType type;
  ReduceOp op;
  size_t count;
  AllreduceAlgorithm algo;
  bool in_place;
};

// Runs one allreduce on every rank and checks every rank's result.
void run_case(Group& group, const Case& c, uint64_t seed) {
  int p = group.size();
  size_t bytes = c.count * dtype_size(c.type);
  std::vector<std::vector<char>> inputs(p), outputs(p);
  for (int r = 0; r < p; ++r) {
    Random rng(seed * 131 + r);
    inputs[r].resize(bytes + 1);
    fill_random(c.type, c.op, inputs[r].data(), c.count, p, rng);
    outputs[r] = c.in_place ? inputs[r] : std::vector<char>(bytes + 1, '\x5a');
  }
  std::vector<std::vector<char>> pristine = inputs;
  group.run([&](int r, Communicator& comm) {
    const char* send = c.in_place ? outputs[r].data() : inputs[r].data();
    comm.allreduce(send, outputs[r].data(), c.count, c.type, c.op);
  });
  for (int r = 0; r < p; ++r) {
    // Every rank holds the same bits (the algorithms reduce in the same order everywhere).
    ASSERT_EQ(std::memcmp(outputs[r].data(), outputs[0].data(), bytes), 0) << "rank " << r;
    ASSERT_EQ(outputs[r][bytes], c.in_place ? pristine[r][bytes] : '\x5a') << "wrote past end";
    if (!c.in_place) {
      ASSERT_EQ(inputs[r], pristine[r]) << "send buffer modified, rank " << r;
    }
  }
  expect_reduced(c.type, c.op, pristine, outputs[0].data(), 0, c.count);
}

TEST_P(AllreduceTest, EveryCountDtypeOpAndAlgorithm) {
  const AllreduceAlgorithm algos[] = {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing,
                                      AllreduceAlgorithm::kHalvingDoubling,
                                      AllreduceAlgorithm::kRecursiveDoubling};
  uint64_t seed = 1;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, kBigCount}) {
    for (int ai = 0; ai < 4; ++ai) {
      for (int ti = 0; ti < kNumDataTypes; ++ti) {
        for (int oi = 0; oi < kNumReduceOps; ++oi) {
          // The 2^20 count runs one (op, algorithm) per dtype, rotating so that every op and
          // every algorithm meet it: the full product would take minutes on two cores.
          if (count == kBigCount && (ti % 4 != ai || ti % kNumReduceOps != oi)) continue;
          Case c{static_cast<DataType>(ti), static_cast<ReduceOp>(oi), count, algos[ai],
                 (seed % 2) == 0};
          SCOPED_TRACE(std::string(allreduce_algorithm_name(c.algo)) + " " + dtype_name(c.type) +
                       " " + reduce_op_name(c.op) + " count " + std::to_string(count) +
                       (c.in_place ? " in place" : ""));
          for (int r = 0; r < group_->size(); ++r) set_algorithm((*group_)[r], c.algo);
          run_case(*group_, c, seed++);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

std::vector<GroupParam> params() {
  std::vector<GroupParam> out;
  for (Transport t : transports_under_test()) {
    for (int size = 1; size <= 8; ++size) out.push_back({t, size});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Groups, AllreduceTest, ::testing::ValuesIn(params()), param_name);

}  // namespace
}  // namespace chorus::comm::testing
