// The single-copy ring (ranks read each other's buffers with process_vm_readv): over shm,
// with ranks as threads of this process (which may always read its own memory), its
// results must be bit for bit those of the byte stream through the rings, for allreduce,
// allgatherv and reduce_scatter, in and out of place, with several units per segment, and
// for an allreduce over many buffers (parts); and it must be chosen only where it applies.
// Cross-process use and a rank killed in the middle of it are in fault_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm_harness.h"
#include "parts.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Both ways of running the ring reduce in the same order; kAuto would pick halving-doubling
// for the stream's smaller calls.
std::unique_ptr<Group> shm_group(int size, bool single_copy,
                                 AllreduceAlgorithm algo = AllreduceAlgorithm::kRing) {
  CommunicatorOptions o = Group::default_options();
  o.shm_single_copy = single_copy;
  o.allreduce_algorithm = algo;
  return std::make_unique<Group>(Transport::kShm, size, o);
}

class SingleCopyTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    on_ = shm_group(GetParam(), true);
    off_ = shm_group(GetParam(), false);
  }
  int p() const { return GetParam(); }

  // Runs `call` on both groups with the same inputs; returns {single-copy, stream} outputs.
  // Out of place, rank r's output has out_bytes[r] bytes; in place, the output buffer
  // starts as the input.
  using Call = std::function<void(Communicator&, const char* in, char* out)>;
  std::pair<std::vector<std::vector<char>>, std::vector<std::vector<char>>> run_both(
      const std::vector<std::vector<char>>& inputs, const std::vector<size_t>& out_bytes,
      bool in_place, const Call& call) {
    std::vector<std::vector<char>> results[2];
    Group* groups[2] = {on_.get(), off_.get()};
    for (int g = 0; g < 2; ++g) {
      std::vector<std::vector<char>> in = inputs, out(p());
      for (int r = 0; r < p(); ++r) {
        out[r] = in_place ? in[r] : std::vector<char>(out_bytes[r] + 1, '\x5a');
        if (in_place) out[r].push_back('\x5a');  // a guard byte past the end
      }
      groups[g]->run([&](int r, Communicator& comm) {
        call(comm, in_place ? out[r].data() : in[r].data(), out[r].data());
      });
      for (int r = 0; r < p(); ++r) {
        EXPECT_EQ(out[r].back(), '\x5a') << "rank " << r << " wrote past the end";
        out[r].pop_back();
        if (!in_place) {
          EXPECT_EQ(in[r], inputs[r]) << "rank " << r << " input modified";
        }
      }
      results[g] = std::move(out);
    }
    for (int r = 0; r < p(); ++r) {
      EXPECT_TRUE((*on_)[r].single_copy()) << "rank " << r;
      EXPECT_FALSE((*off_)[r].single_copy()) << "rank " << r;
    }
    return {std::move(results[0]), std::move(results[1])};
  }

  std::vector<std::vector<char>> random_inputs(DataType t, ReduceOp op, size_t count,
                                               uint64_t seed) {
    std::vector<std::vector<char>> in(p());
    for (int r = 0; r < p(); ++r) {
      Random rng(seed * 977 + r);
      in[r].resize(count * dtype_size(t));
      fill_random(t, op, in[r].data(), count, p(), rng);
    }
    return in;
  }

  std::unique_ptr<Group> on_, off_;
};

TEST_P(SingleCopyTest, AllreduceIsBitForBitTheStream) {
  // Plus one element: 5 MiB + 1 element is more than one 1 MiB unit per segment, and
  // uneven segments.
  uint64_t seed = 1;
  for (const ReduceCase& c : mixed_reduce_cases()) {
    for (bool in_place : {false, true}) {
      size_t count = c.bytes / dtype_size(c.type) + 1;
      SCOPED_TRACE(std::string(dtype_name(c.type)) + " " + reduce_op_name(c.op) + " count " +
                   std::to_string(count) + (in_place ? " in place" : ""));
      auto inputs = random_inputs(c.type, c.op, count, seed++);
      auto [single, stream] =
          run_both(inputs, std::vector<size_t>(p(), count * dtype_size(c.type)), in_place,
                   [&](Communicator& comm, const char* in, char* out) {
                     comm.allreduce(in, out, count, c.type, c.op);
                   });
      for (int r = 0; r < p(); ++r) ASSERT_EQ(single[r], stream[r]) << "rank " << r;
      expect_reduced(c.type, c.op, inputs, single[0].data(), 0, count);
    }
  }
}

TEST_P(SingleCopyTest, AllgathervAndReduceScatterAreBitForBitTheStream) {
  // Uneven blocks, one of them empty, 2.5 MiB of float32 in all.
  std::vector<size_t> counts(p());
  size_t total = 0;
  for (int r = 0; r < p(); ++r) total += counts[r] = r == 1 ? 0 : (5 * kMiB / 8) / p() * (r + 1);
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    auto inputs = random_inputs(DataType::kFloat32, ReduceOp::kSum, total, 11 + in_place);
    std::vector<size_t> block_bytes(p());
    for (int r = 0; r < p(); ++r) block_bytes[r] = counts[r] * 4;
    auto [rs_single, rs_stream] =
        run_both(inputs, block_bytes, in_place, [&](Communicator& comm, const char* in, char* out) {
          comm.reduce_scatter(in, out, counts, DataType::kFloat32, ReduceOp::kSum);
        });
    size_t off = 0;
    for (int r = 0; r < p(); ++r) {
      // In place, the block is at the start of the buffer and the rest is scratch.
      ASSERT_EQ(std::memcmp(rs_single[r].data(), rs_stream[r].data(), block_bytes[r]), 0)
          << "reduce_scatter, rank " << r;
      expect_reduced(DataType::kFloat32, ReduceOp::kSum, inputs, rs_single[r].data(), off,
                     counts[r]);
      off += counts[r];
    }
    // allgatherv: rank r's block at its offset of a buffer of `total` (in place: already there).
    auto [ag_single, ag_stream] =
        run_both(inputs, std::vector<size_t>(p(), total * 4), in_place,
                 [&](Communicator& comm, const char* in, char* out) {
                   size_t at = 0;
                   for (int q = 0; q < comm.rank(); ++q) at += counts[q];
                   comm.allgatherv(in + at * 4, out, counts, DataType::kFloat32);
                 });
    for (int r = 0; r < p(); ++r) {
      ASSERT_EQ(ag_single[r], ag_stream[r]) << "allgatherv, rank " << r;
      size_t at = 0;
      for (int q = 0; q < p(); ++q) {
        ASSERT_EQ(
            std::memcmp(ag_single[r].data() + at * 4, inputs[q].data() + at * 4, counts[q] * 4), 0)
            << "allgatherv, rank " << r << " block " << q;
        at += counts[q];
      }
    }
  }
}

// A multi-buffer allreduce equals the allreduce of the concatenation, bit for bit: read
// where the parts lie (single copy) and staged through one buffer (not). Parts of every
// size including none, some in place; one part has an odd element count.
TEST_P(SingleCopyTest, PartsAreTheConcatenationBitForBit) {
  size_t total = 0;
  for (size_t c : mixed_part_counts()) total += c;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    SCOPED_TRACE(reduce_op_name(op));
    auto inputs = random_inputs(DataType::kFloat32, op, total, 21 + static_cast<int>(op));
    // The reference: one contiguous allreduce (the ring, as the parts get with single copy).
    std::vector<std::vector<char>> flat = inputs;
    on_->run([&](int r, Communicator& comm) {
      comm.allreduce(flat[r].data(), flat[r].data(), total, DataType::kFloat32, op);
    });
    for (Group* group : {on_.get(), off_.get()}) {
      SCOPED_TRACE(group == on_.get() ? "single copy" : "staged");
      expect_parts_equal_flat(*group, inputs, flat, op);
    }
  }
}

TEST(SingleCopyParts, BadPartsAreInvalidArguments) {
  auto group = shm_group(2, true);
  float x = 1.0f;
  auto invalid_because = [&](const std::vector<BufferPart>& parts) -> std::string {
    try {
      (*group)[0].allreduce(parts, DataType::kFloat32, ReduceOp::kSum);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(invalid_because({{&x, &x, 1}, {nullptr, &x, 3}})
                .find("allreduce: a part's send is null with 3 elements"),
            std::string::npos);
  // More bytes than size_t holds.
  EXPECT_NE(invalid_because({{&x, &x, SIZE_MAX / 4}, {&x, &x, 2}})
                .find("allreduce: the parts' counts overflow"),
            std::string::npos);
  // Nothing was sent: the group still works.
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  group->run([&](int r, Communicator& comm) {
    std::vector<BufferPart> one = {{(r ? b : a).data(), (r ? b : a).data(), 8}};
    comm.allreduce(one, DataType::kFloat32, ReduceOp::kSum);
  });
  EXPECT_EQ(a[7], 3.0f);
  EXPECT_EQ(b[0], 3.0f);
}

// Ranks that were given different calls must not read past each other's buffers: the
// buffer lengths and the call's kind are exchanged with the addresses and compared, and
// every rank gets an IoError.
TEST(SingleCopyMismatch, DifferentCountsOrTypesAreIoErrorsOnEveryRank) {
  struct Case {
    size_t count[2];
    DataType type[2];
    const char* expected;
  };
  const Case cases[] = {
      {{kMiB / 4, kMiB / 2},
       {DataType::kFloat32, DataType::kFloat32},
       "(different counts on different ranks?)"},
      {{kMiB / 4, kMiB / 4},
       {DataType::kFloat32, DataType::kInt32},
       "runs another kind of call (data type, reduce op or phases differ)"},
  };
  for (const Case& c : cases) {
    auto group = shm_group(2, true);
    std::vector<std::vector<char>> buf(2, std::vector<char>(kMiB * 2));
    std::string errors[2];
    group->run([&](int r, Communicator& comm) {
      try {
        comm.allreduce(buf[r].data(), buf[r].data(), c.count[r], c.type[r], ReduceOp::kSum);
      } catch (const IoError& e) {
        errors[r] = e.what();
      }
    });
    // The rank that sees the difference first aborts the links, so the other may learn of it
    // as "the peer aborted the link" before it reads the reason itself: then the reason comes
    // with the abort, so every rank names it.
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE((*group)[r].single_copy()) << "rank " << r;
      EXPECT_NE(errors[r].find(c.expected), std::string::npos) << "rank " << r << ": " << errors[r];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SingleCopyTest, ::testing::Values(2, 3, 5),
                         [](const auto& info) { return std::to_string(info.param); });

// Below 1 MiB nothing is agreed (no collective of agreement runs); from 1 MiB it is.
TEST(SingleCopyChoice, StartsAtOneMiB) {
  auto group = shm_group(2, true, AllreduceAlgorithm::kAuto);
  std::vector<std::vector<float>> buf(2, std::vector<float>(kMiB / 4, 1.0f));
  group->run([&](int r, Communicator& comm) {
    comm.allreduce(buf[r].data(), buf[r].data(), kMiB / 4 - 1, DataType::kFloat32, ReduceOp::kSum);
  });
  EXPECT_FALSE((*group)[0].single_copy());
  group->run([&](int r, Communicator& comm) {
    comm.allreduce(buf[r].data(), buf[r].data(), kMiB / 4, DataType::kFloat32, ReduceOp::kSum);
  });
  EXPECT_TRUE((*group)[0].single_copy());
  EXPECT_TRUE((*group)[1].single_copy());
  EXPECT_EQ(buf[0][0], 4.0f);
  EXPECT_EQ(buf[1][kMiB / 4 - 1], 2.0f);
}

// From the streaming size a single buffer out of place streams, but parts that may be read
// stay where they lie: streaming them would first copy them into one buffer and out again.
TEST(SingleCopyChoice, PartsPastTheStreamingSizeStayWhereTheyLie) {
  CommunicatorOptions o = Group::default_options();
  o.shm_streaming_bytes = 4 * kMiB;
  Group group(Transport::kShm, 2, o);
  const size_t n = kMiB / 2;  // three parts of 2 MiB: 6 MiB in all
  std::vector<std::vector<float>> buf(2, std::vector<float>(3 * n));
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < 3 * n; ++i) buf[r][i] = static_cast<float>(r + i % 7);
  }
  std::string plans[2][2];
  group.run([&](int r, Communicator& comm) {
    float* b = buf[r].data();
    comm.allreduce({{b, b, n}, {b + n, b + n, n}, {b + 2 * n, b + 2 * n, n}}, DataType::kFloat32,
                   ReduceOp::kSum);
    plans[r][0] = comm.last_plan();
    std::vector<float> one(3 * n, 1.0f), whole(3 * n);
    comm.allreduce(one.data(), whole.data(), 3 * n, DataType::kFloat32, ReduceOp::kSum);
    plans[r][1] = comm.last_plan();
    EXPECT_EQ(whole[3 * n - 1], 2.0f);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(plans[r][0], "direct (single-copy)") << "rank " << r;
    EXPECT_EQ(plans[r][1].rfind("ring (streaming", 0), 0u) << plans[r][1];
    for (size_t i = 0; i < 3 * n; ++i) {
      ASSERT_EQ(buf[r][i], static_cast<float>(1 + 2 * (i % 7))) << "rank " << r << " at " << i;
    }
  }
}

// TCP links cannot read a peer's memory: the agreement says no on every rank.
TEST(SingleCopyChoice, TcpLinksNeverUseIt) {
  Group group(Transport::kTcp, 3);
  std::vector<std::vector<float>> buf(3, std::vector<float>(kMiB, 2.0f));
  group.run([&](int r, Communicator& comm) {
    comm.allreduce(buf[r].data(), buf[r].data(), kMiB, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_FALSE(comm.single_copy()) << "rank " << r;
  });
  EXPECT_EQ(buf[2][kMiB - 1], 6.0f);
}

TEST(SingleCopyChoice, FromTheEnvironment) {
  ::setenv("CHORUS_SHM_SINGLE_COPY", "0", 1);
  EXPECT_FALSE(CommunicatorOptions::from_env().shm_single_copy);
  ::setenv("CHORUS_SHM_SINGLE_COPY", "1", 1);
  EXPECT_TRUE(CommunicatorOptions::from_env().shm_single_copy);
  ::setenv("CHORUS_SHM_SINGLE_COPY", "yes", 1);
  EXPECT_THROW(CommunicatorOptions::from_env(), InvalidArgument);
  ::setenv("CHORUS_SHM_SINGLE_COPY", "2", 1);
  try {
    CommunicatorOptions::from_env();
    ADD_FAILURE() << "CHORUS_SHM_SINGLE_COPY=2 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("CHORUS_SHM_SINGLE_COPY must be 0 or 1, not 2"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("CHORUS_SHM_SINGLE_COPY");
}

}  // namespace
}  // namespace chorus::comm::testing
