// Ranks as forked processes: a peer SIGKILLed mid-transfer must turn into an IoError on the
// survivor within seconds, a SIGSTOPped peer into a TimeoutError at the deadline, on TCP and
// on shared memory, and nothing may be left behind in /dev/shm.
//
// The parent process is rank 0 (and runs the store server); the child, forked before the
// parent opens any peer socket, is rank 1 and reports setup failures by its exit status.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "chorus/error.h"
#include "mesh_harness.h"

namespace chorus::transport {
namespace {

using testing::options;
using testing::TestStore;

std::set<std::string> chorus_shm_entries() {
  std::set<std::string> names;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name.find("chorus") != std::string::npos) names.insert(name);
    }
    closedir(dir);
  }
  return names;
}

enum class ChildPlan { kSendForever, kStop };

// Rank 1: joins the mesh, then streams bytes to rank 0 (until killed) or stops itself.
[[noreturn]] void run_child(uint16_t port, const Secret& secret, TransportKind kind,
                            ChildPlan plan) {
  int status = 0;
  try {
    TcpStoreClient base("127.0.0.1", port, secret, std::chrono::seconds(10));
    PrefixStore store("kill/", base);
    auto mesh = connect_mesh(store, 1, 2, options(kind, secret, std::chrono::seconds(10)));
    if (plan == ChildPlan::kStop) raise(SIGSTOP);
    std::vector<char> big(size_t{256} << 20, 'k');
    Transfer t = Transfer::send(mesh->link(0), big.data(), big.size());
    Progress(Deadline::after(std::chrono::seconds(30)), "child send").finish(&t, 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child rank 1: %s\n", e.what());
    status = 2;
  }
  _exit(status);
}

class PeerFailure : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override { shm_before_ = chorus_shm_entries(); }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    EXPECT_EQ(chorus_shm_entries(), shm_before_) << "chorus left files in /dev/shm";
  }
  std::unique_ptr<Mesh> start(ChildPlan plan) {
    child_ = fork();
    if (child_ == 0) run_child(store_.port(), store_.secret(), GetParam(), plan);
    auto client = store_.client("kill/");
    return connect_mesh(*client, 0, 2,
                        options(GetParam(), store_.secret(), std::chrono::seconds(10)));
  }

  TestStore store_;
  pid_t child_ = -1;
  std::set<std::string> shm_before_;
};

TEST_P(PeerFailure, KilledPeerIsAnIoErrorWithinSeconds) {
  auto mesh = start(ChildPlan::kSendForever);
  std::vector<char> in(size_t{64} << 20), out(size_t{64} << 20, 'p');
  Transfer first = Transfer::recv(mesh->link(1), in.data(), 1 << 20);
  Progress(Deadline::after(std::chrono::seconds(10)), "first MiB").finish(&first, 1);
  ASSERT_EQ(in[0], 'k');
  ASSERT_EQ(kill(child_, SIGKILL), 0);
  auto killed_at = Clock::now();
  Transfer rest[2] = {Transfer::recv(mesh->link(1), in.data() + (1 << 20), in.size() - (1 << 20)),
                      Transfer::send(mesh->link(1), out.data(), out.size())};
  Progress progress(Deadline::after(std::chrono::seconds(30)), "after kill");
  try {
    progress.finish(rest, 2);
    FAIL() << "transfers with a killed peer completed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  auto took = Clock::now() - killed_at;
  EXPECT_LT(took, std::chrono::seconds(5));
  std::printf("  killed peer noticed after %.1f ms\n",
              std::chrono::duration<double, std::milli>(took).count());
}

TEST_P(PeerFailure, StoppedPeerIsATimeoutAtTheDeadline) {
  auto mesh = start(ChildPlan::kStop);
  std::vector<char> in(1 << 20);
  Transfer t = Transfer::recv(mesh->link(1), in.data(), in.size());
  auto start_at = Clock::now();
  EXPECT_THROW(
      Progress(Deadline::after(std::chrono::seconds(1)), "recv from stopped peer").finish(&t, 1),
      TimeoutError);
  auto took = Clock::now() - start_at;
  EXPECT_GE(took, std::chrono::milliseconds(1000));
  EXPECT_LT(took, std::chrono::milliseconds(2500));
}

INSTANTIATE_TEST_SUITE_P(Kinds, PeerFailure,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) {
                           return std::string(info.param == TransportKind::kTcp ? "tcp" : "shm");
                         });

}  // namespace
}  // namespace chorus::transport
