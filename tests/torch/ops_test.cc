// Tensor collectives: every dtype, non-contiguous tensors in and out of place, every op,
// clear errors for unsupported dtypes and devices, metric helpers and byte broadcast.
#include <gtest/gtest.h>

#include "chorus/error.h"
#include "chorus/torch.h"
#include "torch_harness.h"

namespace chorus::torch_testing {
namespace {

using engine::testing::error_of;

const c10::ScalarType kTypes[] = {::torch::kUInt8,    ::torch::kInt8,    ::torch::kInt16,
                                  ::torch::kInt32,    ::torch::kInt64,   ::torch::kFloat16,
                                  ::torch::kBFloat16, ::torch::kFloat32, ::torch::kFloat64};

TEST(TorchOps, AllreduceSumsEveryDtypeInAndOutOfPlace) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    CollectiveOptions o;
    o.engine = &e;
    o.op = ReduceOp::kSum;
    for (auto type : kTypes) {
      const std::string n = c10::toString(type);
      auto t = ::torch::arange(6, ::torch::kInt64).add(r + 1).remainder(7).to(type).view({2, 3});
      auto want = ::torch::arange(6, ::torch::kInt64).view({2, 3});
      want = (want.add(1).remainder(7) + want.add(2).remainder(7) + want.add(3).remainder(7));
      auto out = allreduce(t, "ar/" + n, o);
      EXPECT_TRUE(out.to(::torch::kInt64).equal(want)) << n;
      EXPECT_EQ(out.scalar_type(), type);
      // In place on a transposed (non-contiguous) view: the result lands in the view.
      auto base = t.clone();
      auto view = base.t();
      ASSERT_FALSE(view.is_contiguous());
      allreduce_(view, "ar_/" + n, o);
      EXPECT_TRUE(base.to(::torch::kInt64).equal(want)) << n;
    }
  });
}

TEST(TorchOps, AverageWithScaleFactors) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    CollectiveOptions o;
    o.engine = &e;
    auto t = ::torch::full({5}, static_cast<double>(r + 1), ::torch::kFloat64);
    EXPECT_TRUE(allreduce(t, "avg", o).equal(::torch::full({5}, 1.5, ::torch::kFloat64)));
    o.prescale = 2.0;
    o.postscale = 0.5;
    EXPECT_TRUE(allreduce(t, "scaled", o).allclose(::torch::full({5}, 1.5, ::torch::kFloat64)));
    auto handle = allreduce_async(t, "async", o);
    EXPECT_TRUE(synchronize(handle).allclose(::torch::full({5}, 1.5, ::torch::kFloat64)));
    EXPECT_TRUE(handle.poll());
  });
}

// ReduceOp::kAdasum through the C++ API (docs/torch.md): each tensor combined as a vector,
// in place on a non-contiguous view too; integers are refused.
TEST(TorchOps, AdasumAddsOrthogonalTensorsAndAveragesEqualOnes) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    CollectiveOptions o;
    o.engine = &e;
    o.op = ReduceOp::kAdasum;
    auto axis = ::torch::zeros({2, 2}, ::torch::kFloat32);
    axis[r][r] = 2.0f * (r + 1);  // rank 0: [[2, 0], [0, 0]]; rank 1: [[0, 0], [0, 4]]
    auto want = ::torch::tensor({2.0f, 0.0f, 0.0f, 4.0f}).view({2, 2});
    EXPECT_TRUE(allreduce(axis, "axis", o).equal(want));
    auto view = axis.t();
    allreduce_(view, "axis_", o);
    EXPECT_TRUE(axis.equal(want));
    auto same = ::torch::tensor({1.5, -3.0, 0.25}, ::torch::kBFloat16);
    EXPECT_TRUE(allreduce(same, "same", o).equal(same));
    auto ints = ::torch::ones({3}, ::torch::kInt32);
    EXPECT_NE(error_of<InvalidArgument>([&] {
                allreduce(ints, "ints", o);
              }).find("Adasum combines floating-point tensors, not int32"),
              std::string::npos);
  });
}

TEST(TorchOps, AllgatherBroadcastAlltoallReduceScatter) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    CollectiveOptions o;
    o.engine = &e;
    // allgather: rank r contributes r + 1 rows of 2, transposed to test staging.
    auto rows = ::torch::full({2, r + 1}, static_cast<float>(r)).t();
    auto all = allgather(rows, "ag", o);
    EXPECT_EQ(all.sizes().vec(), (std::vector<int64_t>{3, 2}));
    EXPECT_TRUE(all.equal(::torch::tensor({0.f, 0.f, 1.f, 1.f, 1.f, 1.f}).view({3, 2})));
    // broadcast, copy and in place on a strided slice.
    auto mine = ::torch::arange(8, ::torch::kInt32).add(10 * r);
    EXPECT_TRUE(broadcast(mine, 1, "bc", o).equal(::torch::arange(8, ::torch::kInt32).add(10)));
    auto every_other = mine.slice(0, 0, 8, 2);
    broadcast_(every_other, 0, "bc_", o);
    EXPECT_TRUE(mine.slice(0, 0, 8, 2).equal(::torch::arange(0, 8, 2, ::torch::kInt32)));
    // alltoall with splits: rank 0 sends 1 row to 0 and 2 to 1; rank 1 sends 3 and 0.
    auto send = ::torch::full({3, 2}, static_cast<int64_t>(r));
    auto h = alltoall_async(send, r == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{3, 0},
                            "a2a", o);
    auto got = h.wait();
    EXPECT_EQ(got.size(0), r == 0 ? 4 : 2);
    EXPECT_EQ(h.received_splits(),
              r == 0 ? (std::vector<int64_t>{1, 3}) : (std::vector<int64_t>{2, 0}));
    // reduce_scatter of 3 rows: rank 0 keeps 2, rank 1 keeps 1.
    o.op = ReduceOp::kSum;
    auto rs = reduce_scatter(::torch::ones({3, 4}), "rs", o);
    EXPECT_EQ(rs.size(0), r == 0 ? 2 : 1);
    EXPECT_TRUE(rs.equal(::torch::full({r == 0 ? 2 : 1, 4}, 2.f)));
  });
}

TEST(TorchOps, UnsupportedDtypeAndDeviceAreClearErrors) {
  EngineGroup g(1);
  CollectiveOptions o;
  o.engine = &g[0];
  std::string m =
      error_of<InvalidArgument>([&] { allreduce(::torch::ones({2}, ::torch::kBool), "b", o); });
  EXPECT_NE(m.find("dtype Bool"), std::string::npos) << m;
  m = error_of<InvalidArgument>(
      [&] { allreduce(::torch::ones({2}, ::torch::kComplexFloat), "c", o); });
  EXPECT_NE(m.find("not supported"), std::string::npos) << m;
  auto meta = ::torch::empty({2}, ::torch::TensorOptions().device(::torch::kMeta));
  m = error_of<InvalidArgument>([&] { allreduce(meta, "m", o); });
  EXPECT_NE(m.find("CPU only"), std::string::npos) << m;
  m = error_of<InvalidArgument>([&] { allgather(::torch::tensor(1.f), "s", o); });
  EXPECT_NE(m.find("at least one dimension"), std::string::npos) << m;
}

TEST(TorchOps, MetricsBytesObjectsAndUnnamedOps) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    EXPECT_DOUBLE_EQ(metric_average(r * 2.0, "m/avg", &e), 2.0);
    EXPECT_DOUBLE_EQ(metric_sum(r + 0.5, "m/sum", &e), 4.5);
    std::string s = r == 2 ? std::string("from rank 2\0 with a nul", 23) : "x";
    broadcast_bytes(s, 2, "bytes", &e);
    EXPECT_EQ(s, std::string("from rank 2\0 with a nul", 23));
    struct Point {
      int32_t x;
      double y;
    } p{r, r * 1.5};
    broadcast_object(p, 1, "obj", &e);
    EXPECT_EQ(p.x, 1);
    EXPECT_EQ(p.y, 1.5);
    CollectiveOptions o;
    o.engine = &e;
    o.op = ReduceOp::kMax;
    EXPECT_EQ(allreduce(::torch::tensor({r}), "", o).item<int64_t>(), 2);
    barrier("done", &e);
  });
}

}  // namespace
}  // namespace chorus::torch_testing
