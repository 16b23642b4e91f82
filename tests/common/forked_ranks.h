// Fault tests with every rank a real process: the fixture forks kRanks children before
// the parent starts any thread, then hosts the TcpStoreServer and sends its port down a
// pipe. Each child creates a Communicator (transport = the test parameter) and runs the
// test's loop, which says "ready" after kHealthyRounds verified rounds and returns how it
// ended (error type, message and the steady_clock time of the throw: CLOCK_MONOTONIC, the
// same clock in every process). The test then SIGKILLs or SIGSTOPs rank kVictim and checks
// the survivors' records. TearDown asserts that no child and no /dev/shm entry is left.
// Shared by tests/comm (collectives) and tests/engine (engine handles); included as
// "../common/forked_ranks.h".
#pragma once

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "chorus/store.h"

namespace chorus::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kRanks = 3;
constexpr int kVictim = 1;         // the stop tests name ranks 0 and 2 as its ring neighbours
constexpr int kHealthyRounds = 3;  // verified rounds before "ready"

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

inline const char* type_of(const std::exception& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const AuthError*>(&e)) return "AuthError";
  if (dynamic_cast<const IoError*>(&e)) return "IoError";
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  return "other";
}

// One report from a child; smaller than PIPE_BUF, so each write() is atomic.
struct Record {
  enum Kind : int32_t { kReady, kFailed, kWrongResult, kSetupFailed };
  Kind kind = kReady;
  int32_t rank = -1;
  int64_t rounds = 0;  // rounds completed and verified
  int64_t at_ns = 0;   // Clock::now() when it happened
  char error_type[32] = {};
  char message[2048] = {};
};
static_assert(sizeof(Record) < PIPE_BUF, "records must be written atomically");

inline Record make_record(Record::Kind kind, int rank, int64_t rounds, const std::exception* e) {
  Record r;
  r.kind = kind;
  r.rank = rank;
  r.rounds = rounds;
  r.at_ns = now_ns();
  if (e) {
    std::snprintf(r.error_type, sizeof(r.error_type), "%s", type_of(*e));
    std::snprintf(r.message, sizeof(r.message), "%s", e->what());
  }
  return r;
}

inline void write_record(int fd, const Record& r) {
  if (::write(fd, &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) ::_exit(4);
}

// Leaves out OpenMPI's segments, which the MPI tests make when ctest runs tests at once.
inline std::set<std::string> dev_shm_entries() {
  std::set<std::string> names;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) {
      if (std::string_view(e->d_name).rfind("vader_segment.", 0) != 0) names.insert(e->d_name);
    }
    ::closedir(dir);
  }
  return names;
}

// Reads one whole Record from fd before `deadline`; nullopt on timeout or end of file.
inline std::optional<Record> read_record(int fd, Clock::time_point deadline) {
  Record r;
  auto* bytes = reinterpret_cast<char*>(&r);
  size_t done = 0;
  while (done < sizeof(r)) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = ::read(fd, bytes + done, sizeof(r) - done);
    if (n == 0) return std::nullopt;
    if (n > 0) done += static_cast<size_t>(n);
  }
  return r;
}

inline double seconds_between(int64_t from_ns, int64_t to_ns) { return (to_ns - from_ns) / 1e9; }

struct Child {
  pid_t pid = -1;
  int port_fd = -1;    // parent writes the store's port
  int report_fd = -1;  // parent reads Records
  int status = 0;
  bool reaped = false;
};

// The test parameter is the transport ("tcp" or "shm").
class ForkedRanks : public ::testing::TestWithParam<const char*> {
 protected:
  // Runs in each child after its Communicator is up: loops until a round throws, writes a
  // kReady record to `report_fd` after kHealthyRounds verified rounds, and returns the
  // record of how it ended (kFailed with the error, or kWrongResult).
  virtual Record run_loop(Communicator& comm, int report_fd) = 0;

  void SetUp() override { shm_before_ = dev_shm_entries(); }

  void TearDown() override {
    for (Child& c : children_) {
      if (!c.reaped) ::kill(c.pid, SIGKILL);
    }
    reap(Clock::now() + std::chrono::seconds(5));
    for (Child& c : children_) {
      EXPECT_TRUE(c.reaped) << "child " << c.pid << " left behind";
      ::close(c.port_fd);
      ::close(c.report_fd);
    }
    server_.reset();
    EXPECT_EQ(dev_shm_entries(), shm_before_) << "new entries in /dev/shm";
  }

  // Forks the ranks, then hosts the store and tells them its port. The parameter is the
  // transport; "shm_streaming" is shm with every allreduce of 1 MiB or more streaming,
  // "shm_streaming_far" the same on cores taken as far apart (streaming through memory),
  // "shm_shared" is shm (the ranks' loops put their buffers in shared memory), and
  // "shm_direct" is shm with the plan's own choice (the direct allreduce, where allowed);
  // the others ask for the ring.
  void start(milliseconds timeout) {
    CommunicatorOptions options;
    options.transport = GetParam();
    if (options.transport == "shm_streaming" || options.transport == "shm_streaming_far") {
      options.shm_placement = options.transport == "shm_streaming_far" ? 1 : 0;
      options.transport = "shm";
      options.shm_streaming_bytes = size_t{1} << 20;
    }
    bool direct = options.transport == "shm_direct";
    if (options.transport == "shm_shared" || direct) options.transport = "shm";
    options.timeout = timeout;
    if (!direct) options.allreduce_algorithm = AllreduceAlgorithm::kRing;
    options.secret = Secret::generate();
    for (int rank = 0; rank < kRanks; ++rank) fork_rank(rank, options);
    server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, options.secret);
    uint16_t port = server_->port();
    for (Child& c : children_) ASSERT_EQ(::write(c.port_fd, &port, sizeof(port)), 2);
  }

  // A child rank: waits for the store's port, joins, loops, reports how the loop ended.
  // The communicator is destroyed (cleanly) before the child exits 0.
  [[noreturn]] void run_rank(int rank, int port_fd, int report_fd, CommunicatorOptions options) {
    uint16_t port = 0;
    if (::read(port_fd, &port, sizeof(port)) != sizeof(port)) ::_exit(5);
    Record outcome;
    try {
      TcpStoreClient store("127.0.0.1", port, options.secret, std::chrono::seconds(10));
      auto comm = Communicator::create(store, rank, kRanks, options);
      outcome = run_loop(*comm, report_fd);
    } catch (const std::exception& e) {
      outcome = make_record(Record::kSetupFailed, rank, 0, &e);
    }
    write_record(report_fd, outcome);
    ::_exit(outcome.kind == Record::kFailed ? 0 : 3);
  }

  void fork_rank(int rank, const CommunicatorOptions& options) {
    int port_pipe[2], report_pipe[2];
    ASSERT_EQ(::pipe(port_pipe), 0);
    ASSERT_EQ(::pipe(report_pipe), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (Child& c : children_) {
        ::close(c.report_fd);
        ::close(c.port_fd);
      }
      ::close(port_pipe[1]);
      ::close(report_pipe[0]);
      run_rank(rank, port_pipe[0], report_pipe[1], options);
    }
    ::close(port_pipe[0]);
    ::close(report_pipe[1]);
    children_.push_back(Child{pid, port_pipe[1], report_pipe[0]});
  }

  // Every rank has verified kHealthyRounds allreduces.
  void wait_until_healthy() {
    auto deadline = Clock::now() + std::chrono::seconds(15);
    for (int rank = 0; rank < kRanks; ++rank) {
      auto r = read_record(children_[rank].report_fd, deadline);
      ASSERT_TRUE(r.has_value()) << "rank " << rank << " never reported";
      ASSERT_EQ(r->kind, Record::kReady)
          << "rank " << rank << ": " << r->error_type << " " << r->message;
      ASSERT_EQ(r->rounds, kHealthyRounds);
    }
  }

  // How every survivor's loop ended, each within `bound` of the fault.
  std::vector<Record> survivor_failures(int64_t fault_ns, milliseconds bound) {
    std::vector<Record> out;
    auto deadline = Clock::time_point(std::chrono::nanoseconds(fault_ns)) + bound;
    for (int rank = 0; rank < kRanks; ++rank) {
      if (rank == kVictim) continue;
      auto r = read_record(children_[rank].report_fd, deadline + std::chrono::seconds(2));
      EXPECT_TRUE(r.has_value()) << "rank " << rank << " still running " << bound.count()
                                 << " ms after the fault";
      if (!r) continue;
      EXPECT_EQ(r->kind, Record::kFailed) << "rank " << rank << ": " << r->message;
      EXPECT_GE(r->rounds, kHealthyRounds) << "rank " << rank << " failed before the fault";
      double took = seconds_between(fault_ns, r->at_ns);
      EXPECT_LT(took * 1000, bound.count()) << "rank " << rank << ": " << r->message;
      std::printf("  rank %d: %s after %.3f s (%lld rounds): %s\n", rank, r->error_type, took,
                  static_cast<long long>(r->rounds), r->message);
      out.push_back(*r);
    }
    return out;
  }

  // Waits for every child to exit, until `deadline`.
  void reap(Clock::time_point deadline) {
    for (;;) {
      bool all = true;
      for (Child& c : children_) {
        if (!c.reaped && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.reaped = true;
        all = all && c.reaped;
      }
      if (all || Clock::now() >= deadline) return;
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

  void expect_exits(int victim_signal) {
    reap(Clock::now() + std::chrono::seconds(10));
    for (int rank = 0; rank < kRanks; ++rank) {
      const Child& c = children_[rank];
      ASSERT_TRUE(c.reaped) << "rank " << rank << " did not exit";
      if (rank == kVictim) {
        EXPECT_TRUE(WIFSIGNALED(c.status) && WTERMSIG(c.status) == victim_signal);
      } else {
        EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << "rank " << rank;
      }
    }
  }

  pid_t victim_pid() const { return children_[kVictim].pid; }

  struct Fault {
    int64_t at_ns = 0;             // when the signal was sent
    std::vector<Record> failures;  // how the survivors' loops ended, in rank order
  };
  // Starts the ranks with the communicator `timeout`, waits until they are healthy, sends
  // `signal` to the victim and collects the survivors' records, each due within `bound` of
  // the signal. A victim that was only stopped is killed afterwards.
  Fault signal_victim(int signal, milliseconds timeout, milliseconds bound) {
    Fault fault;
    start(timeout);
    if (HasFatalFailure()) return fault;
    wait_until_healthy();
    if (HasFatalFailure()) return fault;
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(::kill(victim_pid(), signal), 0);
    fault.at_ns = now_ns();
    fault.failures = survivor_failures(fault.at_ns, bound);
    if (signal != SIGKILL) ::kill(victim_pid(), SIGKILL);
    return fault;
  }

  std::vector<Child> children_;
  std::unique_ptr<TcpStoreServer> server_;
  std::set<std::string> shm_before_;
};

// The peer an error names ("... tcp to rank 2 (...)" / "shm to rank 2 (same host)").
inline int peer_named(const Record& r) {
  std::cmatch m;
  if (!std::regex_search(r.message, m, std::regex(R"((tcp|shm) to rank (\d+) )"))) return -1;
  return std::stoi(m[2]);
}

// The SIGKILL tests' common check: each survivor failed with IoError naming a peer link.
inline void expect_io_errors_naming_a_peer(const std::vector<Record>& failures) {
  for (const Record& r : failures) {
    EXPECT_STREQ(r.error_type, "IoError") << r.message;
    int peer = peer_named(r);
    EXPECT_TRUE(peer >= 0 && peer < kRanks && peer != r.rank) << r.message;
  }
}

inline std::string transport_name(const ::testing::TestParamInfo<const char*>& info) {
  return info.param;
}

}  // namespace chorus::testing
