// Adasum (ReduceOp::kAdasum) over transport x power-of-two world size, every float dtype,
// against an independent reference: the ranks' inputs combined pairwise in rank order in
// float64, in one thread.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "comm_harness.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

using Vector = std::vector<double>;

// Horovod's combination of a and b, into a.
void combine(Vector& a, const Vector& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double tiny = std::sqrt(2.2250738585072014e-308);
  const double ca = aa >= tiny ? 1 - ab / (2 * aa) : 1, cb = bb >= tiny ? 1 - ab / (2 * bb) : 1;
  for (size_t i = 0; i < a.size(); ++i) a[i] = ca * a[i] + cb * b[i];
}

Vector reference(std::vector<Vector> parts) {
  for (size_t width = 1; width < parts.size(); width *= 2) {
    for (size_t left = 0; left < parts.size(); left += 2 * width) {
      combine(parts[left], parts[left + width]);
    }
  }
  return parts[0];
}

Vector values_of(DataType t, const std::vector<char>& buf, size_t n) {
  Vector v(n);
  for (size_t i = 0; i < n; ++i) v[i] = get_float(t, buf.data(), i);
  return v;
}

class AdasumTest : public ::testing::TestWithParam<GroupParam> {
 protected:
  void SetUp() override { group_ = std::make_unique<Group>(GetParam().transport, GetParam().size); }
  std::unique_ptr<Group> group_;
};

// Every rank's result: the same bits, the reference's values within a few roundings of the
// working type per level, the send buffer untouched, nothing written past the end.
void run_case(Group& group, DataType type, size_t count, bool in_place, uint64_t seed) {
  const int p = group.size();
  const size_t bytes = count * dtype_size(type);
  std::vector<std::vector<char>> inputs(p), outputs(p);
  std::vector<Vector> parts;
  double largest = 0;
  for (int r = 0; r < p; ++r) {
    Random rng(seed * 977 + r);
    inputs[r].resize(bytes + 1, '\x33');
    fill_random(type, ReduceOp::kSum, inputs[r].data(), count, p, rng);
    parts.push_back(values_of(type, inputs[r], count));
    for (double x : parts.back()) largest = std::max(largest, std::fabs(x));
    outputs[r] = in_place ? inputs[r] : std::vector<char>(bytes + 1, '\x5a');
  }
  const std::vector<std::vector<char>> pristine = inputs;
  group.run([&](int r, Communicator& comm) {
    const char* send = in_place ? outputs[r].data() : inputs[r].data();
    comm.allreduce(send, outputs[r].data(), count, type, ReduceOp::kAdasum);
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(std::memcmp(outputs[r].data(), outputs[0].data(), bytes), 0) << "rank " << r;
    ASSERT_EQ(outputs[r][bytes], in_place ? '\x33' : '\x5a') << "wrote past the end";
    if (!in_place) {
      ASSERT_EQ(inputs[r], pristine[r]) << "send buffer modified, rank " << r;
    }
  }
  const Vector want = reference(parts), got = values_of(type, outputs[0], count);
  // float32 and float64 are combined in their own type, 16-bit floats in float32.
  const double working =
      type == DataType::kFloat64 ? unit_roundoff(type) : unit_roundoff(DataType::kFloat32);
  const double levels = std::log2(p) + 1;
  for (size_t i = 0; i < count; ++i) {
    const double tol =
        8 * levels * working * p * largest + 2 * unit_roundoff(type) * std::fabs(want[i]);
    ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

TEST_P(AdasumTest, EveryFloatDtypeAndCountMatchesTheReference) {
  const DataType types[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                            DataType::kFloat64};
  uint64_t seed = 1;
  for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{65537}}) {
    for (DataType type : types) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " count " + std::to_string(count));
      run_case(*group_, type, count, seed % 2 == 0, seed);
      ++seed;
      if (HasFatalFailure()) return;
    }
  }
}

// Several tensors in one call (how the engine runs a fused group): each against its own
// reference, every rank with the same bits.
TEST_P(AdasumTest, EachPartIsCombinedOnItsOwn) {
  const int p = group_->size();
  const std::vector<size_t> counts = {13, 0, 1, 1000, 3};
  for (DataType type : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
    SCOPED_TRACE(dtype_name(type));
    const size_t es = dtype_size(type);
    // buffers[r][i]: rank r's part i; in place for odd i.
    std::vector<std::vector<std::vector<char>>> in(p), out(p);
    std::vector<std::vector<Vector>> values(counts.size());
    for (int r = 0; r < p; ++r) {
      Random rng(7 * r + static_cast<int>(type));
      for (size_t i = 0; i < counts.size(); ++i) {
        in[r].emplace_back(counts[i] * es);
        fill_random(type, ReduceOp::kSum, in[r][i].data(), counts[i], p, rng);
        values[i].push_back(values_of(type, in[r][i], counts[i]));
        out[r].push_back(i % 2 ? in[r][i] : std::vector<char>(counts[i] * es));
      }
    }
    group_->run([&](int r, Communicator& comm) {
      std::vector<BufferPart> parts;
      for (size_t i = 0; i < counts.size(); ++i) {
        parts.push_back({i % 2 ? out[r][i].data() : in[r][i].data(), out[r][i].data(), counts[i]});
      }
      comm.allreduce(parts, type, ReduceOp::kAdasum);
    });
    for (size_t i = 0; i < counts.size(); ++i) {
      const Vector want = reference(values[i]), got = values_of(type, out[0][i], counts[i]);
      for (size_t j = 0; j < counts[i]; ++j) {
        ASSERT_NEAR(got[j], want[j], 1e-5 * p + 2 * unit_roundoff(type) * std::fabs(want[j]))
            << "part " << i << " element " << j;
      }
      for (int r = 1; r < p; ++r) ASSERT_EQ(out[r][i], out[0][i]) << "part " << i << " rank " << r;
    }
  }
}

// Orthogonal tensors add up; equal ones stay as they are; each part of a multi-buffer call is
// a tensor of its own.
TEST_P(AdasumTest, OrthogonalTensorsAddUpAndEqualOnesAverage) {
  const int p = group_->size();
  const size_t n = 2 * static_cast<size_t>(p);
  std::vector<Vector> basis(p, Vector(n, 0.0)), same(p, Vector{3.0, -1.0, 0.25});
  for (int r = 0; r < p; ++r) {  // rank r's tensor is nonzero on elements 2r and 2r + 1 only
    basis[r][2 * r] = r + 1.0;
    basis[r][2 * r + 1] = -0.5;
  }
  std::vector<Vector> got_basis = basis, got_same = same;
  group_->run([&](int r, Communicator& comm) {
    std::vector<BufferPart> parts = {{got_basis[r].data(), got_basis[r].data(), n},
                                     {got_same[r].data(), got_same[r].data(), 3}};
    comm.allreduce(parts, DataType::kFloat64, ReduceOp::kAdasum);
  });
  Vector sum(n, 0.0);
  for (const Vector& v : basis) {
    for (size_t i = 0; i < n; ++i) sum[i] += v[i];
  }
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(got_basis[r][i], sum[i], 1e-12) << r << " " << i;
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got_same[r][i], same[0][i], 1e-12) << r << " " << i;
  }
}

std::vector<GroupParam> params() {
  std::vector<GroupParam> out;
  for (Transport t : transports_under_test()) {
    for (int size : {1, 2, 4, 8}) out.push_back({t, size});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Groups, AdasumTest, ::testing::ValuesIn(params()), param_name);

// Errors on every rank, before anything is sent: integer data, a world that is no power of
// two, and Adasum outside allreduce.
TEST(AdasumErrors, IntegersOddWorldsAndReduceScatterAreInvalidArguments) {
  auto expect_invalid = [](Group& group, const std::function<void(Communicator&)>& call,
                           const std::string& words) {
    group.run([&](int, Communicator& comm) {
      try {
        call(comm);
        ADD_FAILURE() << "no error; expected one naming: " << words;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      }
    });
  };
  Group three(Transport::kTcp, 3);
  std::vector<float> x(4, 1.0f);
  expect_invalid(
      three,
      [&](Communicator& c) {
        c.allreduce(x.data(), x.data(), 4, DataType::kFloat32, ReduceOp::kAdasum);
      },
      "Adasum needs a power-of-two number of ranks (it combines them pairwise), not 3");
  Group two(Transport::kTcp, 2);
  std::vector<int32_t> ints(4, 1);
  expect_invalid(
      two,
      [&](Communicator& c) {
        c.allreduce(ints.data(), ints.data(), 4, DataType::kInt32, ReduceOp::kAdasum);
      },
      "Adasum combines floating-point tensors (float16, bfloat16, float32, float64), not int32");
  std::vector<float> out(2);
  expect_invalid(
      two,
      [&](Communicator& c) {
        c.reduce_scatter(x.data(), out.data(), {2, 2}, DataType::kFloat32, ReduceOp::kAdasum);
      },
      "reduce_scatter: Adasum runs in allreduce only");
  // The communicators still work: nothing was sent.
  two.run([&](int, Communicator& c) {
    std::vector<double> v = {1.0, 2.0};
    c.allreduce(v.data(), v.data(), 2, DataType::kFloat64, ReduceOp::kAdasum);
    EXPECT_EQ(v, (std::vector<double>{1.0, 2.0}));  // parallel (equal) inputs: unchanged
  });
}

}  // namespace
}  // namespace chorus::comm::testing
