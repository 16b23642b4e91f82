// Faults in the middle of a collective, with every rank a real process
// (../common/forked_ranks.h): 3 forked ranks loop 4 MiB float32 allreduces (checking each
// result) over tcp or shm; then one rank is SIGKILLed or SIGSTOPped and every survivor's
// allreduce must throw a typed error within a bound. Nothing may be left behind: no child
// process, no new entry in /dev/shm. Over shm, 4 MiB is the single-copy ring (ranks read
// each other's buffers) wherever the kernel lets these processes read each other, with
// shm_direct the direct single-copy allreduce (they also write them), with shm_streaming
// the streaming ring (with shm_streaming_far as on cores far apart), and with shm_shared
// the allreduce in shared memory (Communicator::alloc_shared).
#include <sys/uio.h>

#include <stdexcept>

#include "../common/forked_ranks.h"

namespace chorus::testing {
namespace {

constexpr size_t kCount = size_t{1} << 20;  // 4 MiB of float32

// Rank r contributes r + 1 + (i % 7); the sum is exact in float32.
float contribution(int rank, size_t i) { return static_cast<float>(rank + 1 + i % 7); }
float expected_sum(size_t i) {
  return static_cast<float>(kRanks * (kRanks + 1) / 2 + kRanks * (i % 7));
}

bool sums_match(const float* recv) {
  for (size_t i = 0; i < kCount; ++i) {
    if (recv[i] != expected_sum(i)) return false;
  }
  return true;
}

// Whether this (child) process may read its parent's memory, as a rank reads its peers':
// the same permission check (same user, Yama, seccomp), applied to a process of this job.
bool may_read_parent_memory() {
  static const uint64_t marker = 0x636f7079636f7079ull;
  uint64_t seen = 0;
  iovec local{&seen, sizeof seen};
  iovec remote{const_cast<uint64_t*>(&marker), sizeof seen};  // same address after fork()
  return ::process_vm_readv(::getppid(), &local, 1, &remote, 1, 0) == sizeof seen && seen == marker;
}

class CommFault : public ForkedRanks {
 protected:
  // The plan the streaming parameters must run; nullptr for the others.
  static const char* streaming_plan() {
    if (std::strcmp(GetParam(), "shm_streaming") == 0) return "ring (streaming)";
    if (std::strcmp(GetParam(), "shm_streaming_far") == 0) return "ring (streaming, far)";
    return nullptr;
  }

  // Allreduces until one throws; says "ready" after kHealthyRounds verified results.
  Record run_loop(Communicator& comm, int report_fd) override {
    bool in_shared_memory = std::strcmp(GetParam(), "shm_shared") == 0;
    SharedBuffer shared_send, shared_recv;
    std::vector<float> own_send, own_recv;
    float *send, *recv;
    if (in_shared_memory) {
      shared_send = comm.alloc_shared(kCount * 4);
      shared_recv = comm.alloc_shared(kCount * 4);
      send = static_cast<float*>(shared_send.data());
      recv = static_cast<float*>(shared_recv.data());
    } else {
      own_send.resize(kCount);
      own_recv.resize(kCount);
      send = own_send.data();
      recv = own_recv.data();
    }
    for (size_t i = 0; i < kCount; ++i) send[i] = contribution(comm.rank(), i);
    for (int64_t rounds = 0;; ++rounds) {
      try {
        comm.allreduce(send, recv, kCount, DataType::kFloat32, ReduceOp::kSum);
      } catch (const std::exception& e) {
        return make_record(Record::kFailed, comm.rank(), rounds, &e);
      }
      if (!sums_match(recv)) return make_record(Record::kWrongResult, comm.rank(), rounds, nullptr);
      if (rounds == 0 && std::strcmp(GetParam(), "shm") == 0 &&
          comm.single_copy() != may_read_parent_memory()) {
        std::runtime_error e(comm.single_copy() ? "single copy in use, but the kernel refuses"
                                                : "single copy not in use, though the kernel "
                                                  "lets ranks read each other's memory");
        return make_record(Record::kWrongResult, comm.rank(), rounds, &e);
      }
      if (rounds == 0 && std::strcmp(GetParam(), "shm_direct") == 0 &&
          std::strcmp(comm.last_plan(),
                      may_read_parent_memory() ? "direct (single-copy)" : "ring") != 0) {
        std::runtime_error e(std::string("ran ") + comm.last_plan() + ", not what the plan says");
        return make_record(Record::kWrongResult, comm.rank(), rounds, &e);
      }
      if (rounds == 0 && streaming_plan() != nullptr &&
          std::strcmp(comm.last_plan(), streaming_plan()) != 0) {
        std::runtime_error e(std::string("ran ") + comm.last_plan() + ", not " + streaming_plan());
        return make_record(Record::kWrongResult, comm.rank(), rounds, &e);
      }
      if (rounds == 0 && in_shared_memory &&
          (comm.shared_memory_allreduces() == 1) != may_read_parent_memory()) {
        std::runtime_error e(
            "shared memory used where the kernel refuses, or not used where "
            "it allows");
        return make_record(Record::kWrongResult, comm.rank(), rounds, &e);
      }
      std::fill(recv, recv + kCount, -1.0f);
      if (rounds + 1 == kHealthyRounds) {
        write_record(report_fd, make_record(Record::kReady, comm.rank(), rounds + 1, nullptr));
      }
    }
  }
};

bool names_the_allreduce(const Record& r) {
  return std::strstr(r.message, "allreduce of 1048576 float32") != nullptr;
}

// A killed rank: every survivor throws IoError within 5 s, long before the 20 s timeout —
// from its own link to the dead rank (closed, broken pipe, process gone) or, first, from
// the other survivor aborting its links.
TEST_P(CommFault, KilledRankIsAnIoErrorOnEverySurvivor) {
  auto fault = signal_victim(SIGKILL, std::chrono::seconds(20), milliseconds(5000));
  expect_io_errors_naming_a_peer(fault.failures);
  for (const Record& r : fault.failures) EXPECT_TRUE(names_the_allreduce(r)) << r.message;
  expect_exits(SIGKILL);
}

// A stopped rank (ring order 0 -> 1 -> 2 -> 0, rank 1 stopped), as the code behaves:
// - rank 2 waits to receive from rank 1 and throws TimeoutError at its 1.5 s deadline;
// - rank 0 waits to receive from rank 2 (or, at the end of a single-copy ring, for rank 1's
//   "done"): whichever deadline comes first wins. Either rank 2 timed out first and
//   aborted its links, so rank 0 sees IoError from rank 2 (most runs; over tcp it names
//   rank 2's timeout, from the store), or rank 0's own deadline came first: TimeoutError
//   receiving from rank 2 (or rank 1).
// Both within a few ms of the timeout after the stop; then the stopped rank is killed.
TEST_P(CommFault, StoppedRankIsATimeoutThenIoErrorsCascade) {
  const milliseconds timeout(1500);
  auto [stopped_ns, failures] = signal_victim(SIGSTOP, timeout, timeout + milliseconds(3000));
  ASSERT_EQ(failures.size(), 2u);
  for (const Record& r : failures) {
    EXPECT_TRUE(names_the_allreduce(r)) << r.message;
    EXPECT_GT(seconds_between(stopped_ns, r.at_ns), 1.0) << "failed long before the timeout";
  }
  if (std::strcmp(GetParam(), "shm_shared") == 0) {
    // Both survivors wait for rank 1 through shared memory, each until its own deadline.
    for (const Record& r : failures) {
      EXPECT_STREQ(r.error_type, "TimeoutError") << r.message;
      EXPECT_NE(std::strstr(r.message, ": timed out waiting for rank 1 to "), nullptr) << r.message;
    }
    expect_exits(SIGKILL);
    return;
  }
  const Record& successor = failures[1];  // rank 2
  EXPECT_STREQ(successor.error_type, "TimeoutError") << successor.message;
  EXPECT_NE(std::strstr(successor.message, ": timed out receiving from "), nullptr);
  EXPECT_EQ(peer_named(successor), kVictim) << successor.message;
  const Record& predecessor = failures[0];  // rank 0
  if (std::strstr(predecessor.message, "(single-copy)") != nullptr) {
    // The single-copy ring ends by waiting for the right neighbour's "done" (rank 1).
    int peer = peer_named(predecessor);
    EXPECT_TRUE(peer == 2 || peer == kVictim) << predecessor.message;
  } else {
    EXPECT_EQ(peer_named(predecessor), 2) << predecessor.message;
  }
  if (std::strcmp(predecessor.error_type, "TimeoutError") == 0) {
    EXPECT_NE(std::strstr(predecessor.message, ": timed out receiving from "), nullptr);
  } else {
    EXPECT_STREQ(predecessor.error_type, "IoError") << predecessor.message;
    if (std::strcmp(GetParam(), "tcp") == 0) {
      // Rank 2's own error, which it left in the store when it aborted its links.
      EXPECT_NE(std::strstr(predecessor.message, ": the peer aborted the link ("), nullptr)
          << predecessor.message;
      EXPECT_NE(std::strstr(predecessor.message, "timed out receiving from tcp to rank 1"), nullptr)
          << predecessor.message;
    }
  }
  expect_exits(SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Transports, CommFault,
                         ::testing::Values("tcp", "shm", "shm_direct", "shm_streaming",
                                           "shm_streaming_far", "shm_shared"),
                         transport_name);

}  // namespace
}  // namespace chorus::testing
