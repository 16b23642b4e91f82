// Communicator::alloc_shared and the allreduce in shared memory, with ranks as threads over
// real shm links (each rank still opens the others' regions through /proc/<pid>/fd): results
// against an independent reference for every type and op, in and out of place; the fallback
// to the usual path when one rank's buffer is not shared; mismatches as InvalidArgument on
// every rank; plain memory where nothing can be shared. Separate processes, and a rank
// killed or stopped in the middle, are in fault_test.cc (shm_shared).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "comm/shared_memory.h"
#include "comm_harness.h"
#include "values.h"

namespace chorus::comm::testing {
namespace {

constexpr DataType kTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                               DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                               DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

// Every rank's error from fn, as "Type: message" ("" when it returned).
std::vector<std::string> errors_of(Group& group,
                                   const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::string> errors(group.size());
  group.run([&](int r, Communicator& comm) {
    try {
      fn(r, comm);
    } catch (const InvalidArgument& e) {
      errors[r] = std::string("InvalidArgument: ") + e.what();
    } catch (const std::exception& e) {
      errors[r] = std::string("other: ") + e.what();
    }
  });
  return errors;
}

class SharedMemoryTest : public ::testing::TestWithParam<int> {
 protected:
  int p() const { return GetParam(); }
};

TEST_P(SharedMemoryTest, AllreduceMatchesTheReferenceForEveryTypeAndOp) {
  Group group(Transport::kShm, p());
  const size_t counts[] = {1, 7, 1023, (size_t{1} << 20) + 3};
  const size_t max_bytes = counts[3] * 8;
  std::vector<SharedBuffer> send(p()), recv(p());
  group.run([&](int r, Communicator& comm) {
    send[r] = comm.alloc_shared(max_bytes);
    recv[r] = comm.alloc_shared(max_bytes);
  });
  for (int r = 0; r < p(); ++r) {
    ASSERT_TRUE(send[r].shared() && recv[r].shared()) << "rank " << r;
    ASSERT_EQ(send[r].size(), max_bytes);
  }
  uint64_t expected_calls = 0, seed = 1;
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : counts) {
        if (count == counts[3] && op != ReduceOp::kSum && op != ReduceOp::kAverage) continue;
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + reduce_op_name(op) + " count " +
                       std::to_string(count) + (in_place ? " in place" : ""));
          size_t bytes = count * dtype_size(t);
          std::vector<std::vector<char>> inputs(p(), std::vector<char>(bytes));
          for (int r = 0; r < p(); ++r) {
            Random rng(seed++);
            fill_random(t, op, inputs[r].data(), count, p(), rng);
            std::memcpy(send[r].data(), inputs[r].data(), bytes);
            std::memset(recv[r].data(), 0x5a, bytes + 1);  // and a guard byte past the end
          }
          group.run([&](int r, Communicator& comm) {
            void* out = in_place ? send[r].data() : recv[r].data();
            comm.allreduce(send[r].data(), out, count, t, op);
          });
          if (bytes >= kSharedMinBytes) ++expected_calls;  // smaller ones take the usual path
          const char* first = static_cast<const char*>(in_place ? send[0].data() : recv[0].data());
          expect_reduced(t, op, inputs, first, 0, count);
          for (int r = 0; r < p(); ++r) {
            const char* out = static_cast<const char*>(in_place ? send[r].data() : recv[r].data());
            ASSERT_EQ(std::memcmp(out, first, bytes), 0) << "rank " << r << " differs from rank 0";
            if (!in_place) {
              ASSERT_EQ(std::memcmp(send[r].data(), inputs[r].data(), bytes), 0)
                  << "rank " << r << "'s input was modified";
              ASSERT_EQ(static_cast<char*>(recv[r].data())[bytes], '\x5a')
                  << "rank " << r << "'s output was written past its end";
            }
          }
        }
      }
    }
  }
  for (int r = 0; r < p(); ++r) EXPECT_EQ(group[r].shared_memory_allreduces(), expected_calls);
}

// Buffers anywhere in any shared allocation, at different offsets on different ranks.
TEST_P(SharedMemoryTest, BuffersMayLieAtDifferentOffsetsOnEachRank) {
  Group group(Transport::kShm, p());
  const size_t count = 100003;
  std::vector<SharedBuffer> a(p()), b(p());
  group.run([&](int r, Communicator& comm) {
    a[r] = comm.alloc_shared(count * 4 + 4096);
    b[r] = comm.alloc_shared(count * 4 + 4096);
  });
  std::vector<std::vector<char>> inputs(p(), std::vector<char>(count * 4));
  std::vector<float*> in(p()), out(p());
  for (int r = 0; r < p(); ++r) {
    Random rng(100 + r);
    fill_random(DataType::kFloat32, ReduceOp::kSum, inputs[r].data(), count, p(), rng);
    // Odd ranks: input in b, output in a; even ranks the other way, at other offsets.
    SharedBuffer& from = r % 2 ? b[r] : a[r];
    SharedBuffer& to = r % 2 ? a[r] : b[r];
    in[r] = reinterpret_cast<float*>(static_cast<char*>(from.data()) + 4 * r);
    out[r] = reinterpret_cast<float*>(static_cast<char*>(to.data()) + 4096 - 4 * r);
    std::memcpy(in[r], inputs[r].data(), count * 4);
  }
  group.run([&](int r, Communicator& comm) {
    comm.allreduce(in[r], out[r], count, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < p(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_reduced(DataType::kFloat32, ReduceOp::kSum, inputs,
                   reinterpret_cast<const char*>(out[r]), 0, count);
    EXPECT_EQ(group[r].shared_memory_allreduces(), 1u);
  }
}

// One rank's output is ordinary memory: every rank sees it in the handshake and runs the
// usual allreduce instead, with the same results.
TEST_P(SharedMemoryTest, OneRankNotInSharedMemoryMakesEveryRankTakeTheUsualPath) {
  Group group(Transport::kShm, p());
  const size_t count = 300001;
  std::vector<SharedBuffer> buf(p());
  group.run([&](int r, Communicator& comm) { buf[r] = comm.alloc_shared(count * 4); });
  std::vector<std::vector<char>> inputs(p(), std::vector<char>(count * 4));
  std::vector<float> plain(count);
  for (int r = 0; r < p(); ++r) {
    Random rng(200 + r);
    fill_random(DataType::kFloat32, ReduceOp::kSum, inputs[r].data(), count, p(), rng);
    std::memcpy(buf[r].data(), inputs[r].data(), count * 4);
  }
  const int odd_one = p() - 1;
  group.run([&](int r, Communicator& comm) {
    void* out = r == odd_one ? static_cast<void*>(plain.data()) : buf[r].data();
    comm.allreduce(buf[r].data(), out, count, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < p(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const void* out = r == odd_one ? static_cast<const void*>(plain.data()) : buf[r].data();
    expect_reduced(DataType::kFloat32, ReduceOp::kSum, inputs, static_cast<const char*>(out), 0,
                   count);
    EXPECT_EQ(group[r].shared_memory_allreduces(), 0u);
  }
}

// A count, type or op that differs on one rank (of 8000 bytes: calls that shake hands):
// InvalidArgument on every rank naming both calls, and the communicator stays usable.
TEST_P(SharedMemoryTest, MismatchedCallsAreAnInvalidArgumentOnEveryRank) {
  Group group(Transport::kShm, p());
  std::vector<SharedBuffer> buf(p());
  group.run([&](int r, Communicator& comm) { buf[r] = comm.alloc_shared(16384); });
  const int odd_one = p() - 1;
  struct Mismatch {
    size_t count;
    DataType type;
    ReduceOp op;
    const char* odd_call;
  } mismatches[] = {{2001, DataType::kFloat32, ReduceOp::kSum, "2001 float32 sum"},
                    {2000, DataType::kInt32, ReduceOp::kSum, "2000 int32 sum"},
                    {2000, DataType::kFloat32, ReduceOp::kMax, "2000 float32 max"}};
  for (const Mismatch& m : mismatches) {
    SCOPED_TRACE(m.odd_call);
    auto errors = errors_of(group, [&](int r, Communicator& comm) {
      bool odd = r == odd_one;
      comm.allreduce(buf[r].data(), buf[r].data(), odd ? m.count : 2000,
                     odd ? m.type : DataType::kFloat32, odd ? m.op : ReduceOp::kSum);
    });
    for (int r = 0; r < p(); ++r) {
      EXPECT_EQ(errors[r].rfind("InvalidArgument: ", 0), 0u) << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find("] allreduce: rank "), std::string::npos) << errors[r];
      EXPECT_NE(errors[r].find(m.odd_call), std::string::npos) << errors[r];
      EXPECT_NE(errors[r].find("2000 float32 sum"), std::string::npos) << errors[r];
    }
  }
  for (int r = 0; r < p(); ++r) static_cast<float*>(buf[r].data())[0] = 1.0f + r;
  group.run([&](int r, Communicator& comm) {
    comm.allreduce(buf[r].data(), buf[r].data(), 1, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < p(); ++r) {
    EXPECT_FALSE(group[r].broken());
    EXPECT_EQ(static_cast<float*>(buf[r].data())[0], p() * (p() + 1) / 2.0f) << "rank " << r;
  }
}

TEST_P(SharedMemoryTest, DifferentSizesAreAnInvalidArgumentOnEveryRank) {
  Group group(Transport::kShm, p());
  auto errors =
      errors_of(group, [&](int r, Communicator& comm) { comm.alloc_shared(r == 1 ? 8192 : 4096); });
  for (int r = 0; r < p(); ++r) {
    EXPECT_EQ(errors[r].rfind("InvalidArgument: ", 0), 0u) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("] alloc_shared: rank 1 asked for 8192 bytes, rank 0 for 4096"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
  std::vector<SharedBuffer> buf(p());
  group.run([&](int r, Communicator& comm) { buf[r] = comm.alloc_shared(4096); });
  for (int r = 0; r < p(); ++r) EXPECT_TRUE(buf[r].shared()) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, SharedMemoryTest, ::testing::Values(2, 3, 4, 5));

// What the engine asks when an op is enqueued: inside a live shared allocation, whole.
TEST(SharedMemory, InSharedMemoryKnowsTheLiveAllocations) {
  Group group(Transport::kShm, 2);
  std::vector<SharedBuffer> buf(2);
  group.run([&](int r, Communicator& comm) { buf[r] = comm.alloc_shared(8192); });
  const char* p = static_cast<const char*>(buf[0].data());
  EXPECT_TRUE(group[0].in_shared_memory(p, 8192));
  EXPECT_TRUE(group[0].in_shared_memory(p + 8191, 1));
  EXPECT_TRUE(group[0].in_shared_memory(p + 100, 0));
  EXPECT_FALSE(group[0].in_shared_memory(p + 1, 8192)) << "runs past the end";
  EXPECT_FALSE(group[0].in_shared_memory(p - 1, 2)) << "starts before it";
  std::vector<char> heap(64);
  EXPECT_FALSE(group[0].in_shared_memory(heap.data(), heap.size()));
  EXPECT_FALSE(group[1].in_shared_memory(p, 1)) << "rank 1 maps rank 0's, but it is not its own";
  buf.assign(2, SharedBuffer());  // freed: no longer shared
  EXPECT_FALSE(group[0].in_shared_memory(p, 1));
}

TEST(SharedMemory, TcpLinksGivePlainMemoryAndTheUsualAllreduce) {
  Group group(Transport::kTcp, 2);
  std::vector<SharedBuffer> buf(2);
  group.run([&](int r, Communicator& comm) { buf[r] = comm.alloc_shared(1000); });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(buf[r].shared());
    ASSERT_EQ(buf[r].size(), 1000u);
    const char* p = static_cast<const char*>(buf[r].data());
    EXPECT_TRUE(std::all_of(p, p + 1000, [](char c) { return c == 0; })) << "not zeroed";
    static_cast<int32_t*>(buf[r].data())[0] = 5 + r;
  }
  group.run([&](int r, Communicator& comm) {
    comm.allreduce(buf[r].data(), buf[r].data(), 1, DataType::kInt32, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(static_cast<int32_t*>(buf[r].data())[0], 11);
    EXPECT_EQ(group[r].shared_memory_allreduces(), 0u);
  }
}

TEST(SharedMemory, OneRankGetsPlainMemory) {
  Group group(Transport::kShm, 1);
  SharedBuffer buf = group[0].alloc_shared(64);
  EXPECT_FALSE(buf.shared());
  EXPECT_EQ(buf.size(), 64u);
  EXPECT_NE(buf.data(), nullptr);
}

TEST(SharedMemory, BadSizesAreRefusedBeforeAnythingIsSent) {
  Group group(Transport::kShm, 2);
  try {
    group[0].alloc_shared(0);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("alloc_shared: 0 bytes (must be 1 .. "), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(group[0].alloc_shared(size_t{1} << 50), InvalidArgument);
  EXPECT_FALSE(group[0].broken());
}

// A real shm link that, when `refuse`, cannot open the peer's files (as without /proc).
class MaybeNoOpenLink : public transport::Link, public transport::PeerMemory {
 public:
  MaybeNoOpenLink(transport::Link& inner, bool refuse)
      : Link(inner.peer()), inner_(inner), memory_(*inner.peer_memory()), refuse_(refuse) {}
  size_t try_send(const void* d, size_t n) override { return inner_.try_send(d, n); }
  size_t try_recv(void* d, size_t n) override { return inner_.try_recv(d, n); }
  int poll_fd() const override { return inner_.poll_fd(); }
  bool wait_ready(bool s, std::chrono::nanoseconds w) override { return inner_.wait_ready(s, w); }
  const char* peek_recv(size_t* a) override { return inner_.peek_recv(a); }
  void consume_recv(size_t n) override { inner_.consume_recv(n); }
  char* reserve_send(size_t* a) override { return inner_.reserve_send(a); }
  void commit_send(size_t n) override { inner_.commit_send(n); }
  transport::PeerMemory* peer_memory() override { return this; }
  bool probe() override { return memory_.probe(); }
  void read(const transport::PeerCopy* p, size_t n) override { memory_.read(p, n); }
  void write(const transport::PeerCopy* p, size_t n) override { memory_.write(p, n); }
  int open_file(int fd) override {
    if (refuse_) CHORUS_THROW(IoError, "opening descriptor ", fd, ": no /proc here (test)");
    return memory_.open_file(fd);
  }
  void check_alive() override { inner_.check_alive(); }
  void abort(std::string_view reason) noexcept override { inner_.abort(reason); }
  std::string describe() const override { return inner_.describe(); }

 private:
  transport::Link& inner_;
  transport::PeerMemory& memory_;
  bool refuse_;
};

// One rank cannot open its peers' files: every rank gets plain memory, the allreduce takes
// the usual path, and nothing breaks.
TEST(SharedMemory, ARankThatCannotOpenItsPeersFilesMakesEveryRankFallBack) {
  const int p = 3, refusing = 1;
  transport::testing::TestStore store;
  std::vector<std::unique_ptr<transport::Mesh>> real(p);
  std::vector<std::unique_ptr<Communicator>> comms(p);
  run_ranks(p, [&](int r) {
    auto client = store.client("m");
    real[r] = transport::connect_mesh(
        *client, r, p, transport::testing::options(transport::TransportKind::kShm, store.secret()));
    auto mesh = std::make_unique<GivenMesh>(r, p);
    for (int q = 0; q < p; ++q) {
      if (q != r)
        mesh->set_link(q, std::make_unique<MaybeNoOpenLink>(real[r]->link(q), r == refusing));
    }
    comms[r] = make_communicator(std::move(mesh), Group::default_options());
  });
  std::vector<SharedBuffer> buf(p);
  run_ranks(p, [&](int r) { buf[r] = comms[r]->alloc_shared(8192 * 4); });
  for (int r = 0; r < p; ++r) {
    EXPECT_FALSE(buf[r].shared()) << "rank " << r;
    ASSERT_EQ(buf[r].size(), 8192u * 4);
    for (int i = 0; i < 8192; ++i)
      static_cast<float*>(buf[r].data())[i] = static_cast<float>(r + i);
  }
  run_ranks(p, [&](int r) {
    comms[r]->allreduce(buf[r].data(), buf[r].data(), 8192, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_FALSE(comms[r]->broken());
    EXPECT_EQ(comms[r]->shared_memory_allreduces(), 0u);
    for (int i = 0; i < 8192; i += 97) {
      ASSERT_EQ(static_cast<float*>(buf[r].data())[i], 3.0f * i + 3.0f) << "rank " << r;
    }
  }
}

// The memory stays valid while a handle exists, after the communicator is gone.
TEST(SharedMemory, BuffersOutliveTheirCommunicator) {
  std::vector<SharedBuffer> buf(2);
  {
    Group group(Transport::kShm, 2);
    group.run([&](int r, Communicator& comm) { buf[r] = comm.alloc_shared(1 << 20); });
    ASSERT_TRUE(buf[0].shared());
  }
  for (int r = 0; r < 2; ++r) {
    std::memset(buf[r].data(), 0x11 * (r + 1), buf[r].size());
    EXPECT_EQ(static_cast<char*>(buf[r].data())[buf[r].size() - 1], 0x11 * (r + 1));
  }
}

}  // namespace
}  // namespace chorus::comm::testing
