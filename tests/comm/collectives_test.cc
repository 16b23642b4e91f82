// allgather(v), broadcast (every root), reduce_scatter, alltoall(v) and barrier over
// transport x world size, with uneven counts (zeros included) and in-place variants.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm_harness.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

class CollectivesTest : public ::testing::TestWithParam<GroupParam> {
 protected:
  void SetUp() override { group_ = std::make_unique<Group>(GetParam().transport, GetParam().size); }
  int p() const { return group_->size(); }
  std::unique_ptr<Group> group_;
};

// Uneven per-rank counts: pattern 0 all zero, 1 zeros mixed in, 2 large (pipelined chunks).
std::vector<size_t> uneven_counts(int p, int pattern) {
  std::vector<size_t> c(p);
  for (int i = 0; i < p; ++i) {
    if (pattern == 1) c[i] = (i * 7 + 3) % 5;  // 3, 0, 2, 4, 1, ...
    if (pattern == 2) c[i] = 300000 + 1001 * i;
  }
  return c;
}

std::vector<char> random_bytes(size_t n, uint64_t seed) {
  Random rng(seed);
  std::vector<char> b(n);
  for (auto& x : b) x = static_cast<char>(rng.next());
  return b;
}

TEST_P(CollectivesTest, AllgathervUnevenInAndOutOfPlace) {
  for (int pattern = 0; pattern < 3; ++pattern) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE("pattern " + std::to_string(pattern) + (in_place ? " in place" : ""));
      DataType t = pattern == 2 ? DataType::kFloat32 : DataType::kInt64;
      size_t es = dtype_size(t);
      auto counts = uneven_counts(p(), pattern);
      std::vector<size_t> off(p() + 1, 0);
      for (int i = 0; i < p(); ++i) off[i + 1] = off[i] + counts[i];
      std::vector<std::vector<char>> blocks(p());
      std::vector<char> want;
      for (int i = 0; i < p(); ++i) {
        blocks[i] = random_bytes(counts[i] * es, 100 + i + pattern);
        want.insert(want.end(), blocks[i].begin(), blocks[i].end());
      }
      std::vector<std::vector<char>> out(p(), std::vector<char>(off[p()] * es, 'x'));
      group_->run([&](int r, Communicator& comm) {
        char* own = out[r].data() + off[r] * es;
        // Not for an empty block: memcpy from its null data() is undefined even for 0 bytes.
        if (in_place && !blocks[r].empty()) std::memcpy(own, blocks[r].data(), blocks[r].size());
        comm.allgatherv(in_place ? own : blocks[r].data(), out[r].data(), counts, t);
      });
      for (int r = 0; r < p(); ++r) ASSERT_EQ(out[r], want) << "rank " << r;
    }
  }
  std::vector<std::vector<int32_t>> got(p(), std::vector<int32_t>(13 * p()));
  group_->run([&](int r, Communicator& comm) {
    std::vector<int32_t> mine(13, r * 1000);
    comm.allgather(mine.data(), got[r].data(), 13, DataType::kInt32);
  });
  for (int r = 0; r < p(); ++r) {
    for (int i = 0; i < 13 * p(); ++i) ASSERT_EQ(got[r][i], (i / 13) * 1000);
  }
}

TEST_P(CollectivesTest, BroadcastFromEveryRoot) {
  // 100000 float64 = 800 KB takes the pipelined chain; the others the binomial tree.
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{100000}}) {
    for (int root = 0; root < p(); ++root) {
      SCOPED_TRACE("count " + std::to_string(count) + " root " + std::to_string(root));
      auto want = random_bytes(count * 8, count + root);
      std::vector<std::vector<char>> buf(p(), std::vector<char>(count * 8, 0));
      buf[root] = want;
      group_->run([&](int r, Communicator& comm) {
        comm.broadcast(buf[r].data(), count, DataType::kFloat64, root);
      });
      for (int r = 0; r < p(); ++r) ASSERT_EQ(buf[r], want) << "rank " << r;
    }
  }
}

TEST_P(CollectivesTest, ReduceScatterUnevenInAndOutOfPlace) {
  const DataType types[] = {DataType::kFloat32, DataType::kInt32, DataType::kFloat16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax};
  uint64_t seed = 7;
  for (int pattern = 0; pattern < 3; ++pattern) {
    for (int k = 0; k < 3; ++k) {
      for (bool in_place : {false, true}) {
        DataType t = types[k];
        ReduceOp op = ops[(k + pattern) % 3];
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + reduce_op_name(op) + " pattern " +
                     std::to_string(pattern) + (in_place ? " in place" : ""));
        size_t es = dtype_size(t);
        auto counts = uneven_counts(p(), pattern);
        size_t total = 0;
        for (size_t c : counts) total += c;
        std::vector<std::vector<char>> in(p()), out(p());
        for (int r = 0; r < p(); ++r) {
          Random rng(seed++);
          in[r].resize(total * es);
          fill_random(t, op, in[r].data(), total, p(), rng);
          out[r] = in_place ? in[r] : std::vector<char>(counts[r] * es);
        }
        group_->run([&](int r, Communicator& comm) {
          comm.reduce_scatter(in_place ? out[r].data() : in[r].data(), out[r].data(), counts, t,
                              op);
        });
        size_t off = 0;
        for (int r = 0; r < p(); ++r) {
          SCOPED_TRACE("rank " + std::to_string(r));
          expect_reduced(t, op, in, out[r].data(), off, counts[r]);
          off += counts[r];
        }
      }
    }
  }
}

TEST_P(CollectivesTest, AlltoallvUnevenAndAlltoallInPlace) {
  int n = p();
  // count[i][j]: elements rank i sends to rank j (zeros included).
  auto count = [](int i, int j) { return static_cast<size_t>((i * 3 + j * 5) % 7) * 1001; };
  auto value = [](int i, int j, size_t k) {
    return static_cast<int32_t>(i * 1000003 + j * 7919 + k);
  };
  std::vector<std::vector<int32_t>> out(n);
  group_->run([&](int r, Communicator& comm) {
    std::vector<size_t> sc(n), rc(n);
    std::vector<int32_t> send;
    for (int j = 0; j < n; ++j) {
      sc[j] = count(r, j);
      rc[j] = count(j, r);
      for (size_t k = 0; k < sc[j]; ++k) send.push_back(value(r, j, k));
    }
    size_t total = 0;
    for (size_t c : rc) total += c;
    out[r].assign(total, -1);
    comm.alltoallv(send.data(), sc, out[r].data(), rc, DataType::kInt32);
  });
  for (int r = 0; r < n; ++r) {
    size_t pos = 0;
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < count(i, r); ++k) ASSERT_EQ(out[r][pos++], value(i, r, k));
    }
  }
  std::vector<std::vector<int64_t>> buf(n, std::vector<int64_t>(5 * n));
  group_->run([&](int r, Communicator& comm) {
    for (int j = 0; j < 5 * n; ++j) buf[r][j] = r * 100 + j / 5;  // block j/5 goes to j/5
    comm.alltoall(buf[r].data(), buf[r].data(), 5, DataType::kInt64);
  });
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < 5 * n; ++j) ASSERT_EQ(buf[r][j], (j / 5) * 100 + r);
  }
}

TEST_P(CollectivesTest, BarrierWaitsForTheLastRank) {
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> entered{0};
    std::vector<int> seen(p());
    group_->run([&](int r, Communicator& comm) {
      std::this_thread::sleep_for(std::chrono::milliseconds(r == p() - 1 ? 30 : 0));
      entered.fetch_add(1);
      comm.barrier();
      seen[r] = entered.load();
    });
    for (int r = 0; r < p(); ++r) EXPECT_EQ(seen[r], p()) << "rank " << r << " left early";
  }
}

std::vector<GroupParam> params() {
  std::vector<GroupParam> out;
  for (Transport t : transports_under_test()) {
    for (int size : {1, 2, 3, 4, 5, 7, 8}) out.push_back({t, size});
  }
  out.push_back({Transport::kSocketpair, 6});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Groups, CollectivesTest, ::testing::ValuesIn(params()), param_name);

}  // namespace
}  // namespace chorus::comm::testing
