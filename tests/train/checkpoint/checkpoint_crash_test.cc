// Crash atomicity with real processes: children saving checkpoints (or single files) are
// SIGKILLed before the commit, or at random moments, and what they leave must restore.
// Also: several processes saving into one directory, a live save that a new manager must
// not clean away, and wait_for_newer woken by another process.
//
// A SIGKILL keeps what reached the page cache, so these tests check the rename protocol
// and the cleanup, not the fsyncs (those need power to fail; see docs/checkpoints.md).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "chorus/error.h"
#include "chorus/train/checkpoint.h"
#include "test_util.h"
#include "train/checkpoint/commit.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using testing::entries;
using testing::exited_ok;
using testing::fork_child;
using testing::wait_status;
using Files = std::map<std::string, std::string>;

// What a child saves for (step, version): the content tells which save wrote it.
Files content(int64_t step, int version) {
  uint32_t seed = static_cast<uint32_t>(step * 10 + version);
  size_t big = (step % 3 == 0) ? (2 << 20) : (64 << 10) * (1 + step % 5);
  return {{"model.bin", testing::random_bytes(big, seed)},
          {"optimizer.bin", testing::random_bytes(1000 + step, seed + 1)},
          {"progress", std::to_string(step) + "/" + std::to_string(version)}};
}

bool is_uncommitted(const std::string& name) { return !name.empty() && name[0] == '.'; }

class CrashTest : public ::testing::Test {
 protected:
  std::string dir() const { return tmp_.path() + "/ckpts"; }
  testing::TempDir tmp_;
};

TEST_F(CrashTest, KilledBeforeCommitLeavesThePreviousCheckpoint) {
  CheckpointManager(dir()).save(1, content(1, 0));
  pid_t child = fork_child([&] {
    CheckpointOptions options;
    options.before_commit = [](const std::string&) { ::raise(SIGKILL); };
    CheckpointManager(dir(), options).save(2, content(2, 0));
    return 0;  // not reached
  });
  int status = wait_status(child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;
  ASSERT_EQ(WTERMSIG(status), SIGKILL);

  // The dead save's temporary directory, complete with its manifest, is still there...
  auto before = entries(dir());
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].rfind(".ckpt-tmp-2-" + std::to_string(child) + "-", 0), 0u) << before[0];
  EXPECT_TRUE(std::filesystem::exists(dir() + "/" + before[0] + "/MANIFEST"));
  // ...and never counts as a checkpoint.
  CheckpointManager m(dir());
  EXPECT_EQ(entries(dir()), std::vector<std::string>{"ckpt-1"});  // removed by the constructor
  ASSERT_TRUE(m.latest());
  EXPECT_EQ(m.latest()->step, 1);
  EXPECT_EQ(m.restore(1).files, content(1, 0));
  EXPECT_EQ(m.restore_latest()->step, 1);
}

TEST_F(CrashTest, LiveSaveIsNotCleanedByAnotherManager) {
  CheckpointManager(dir()).save(1, content(1, 0));
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  pid_t child = fork_child([&] {
    ::close(go[1]);  // so that the read below ends if the parent dies
    CheckpointOptions options;
    options.before_commit = [&](const std::string&) {
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(3);
    };
    CheckpointManager(dir(), options).save(2, content(2, 0));
    return 0;
  });
  testing::ChildGuard guard(child);
  ::close(go[0]);
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);  // the child sits before its commit
  CheckpointManager m(dir());             // cleans leftovers: must leave the live one
  m.remove_all();                         // likewise
  auto during = entries(dir());
  EXPECT_EQ(during.size(), 1u);
  EXPECT_TRUE(during.size() == 1 && is_uncommitted(during[0]));
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  EXPECT_TRUE(exited_ok(wait_status(child)));
  EXPECT_EQ(CheckpointManager(dir()).restore(2).files, content(2, 0));
  ::close(ready[0]);
  ::close(go[1]);
}

// A child saving in a loop (every other step twice, replacing it) is killed at random
// moments; whatever is committed must verify, and a new manager leaves no leftovers.
class RandomKillTest : public CrashTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override { ckpt::set_rename_exchange_enabled(GetParam()); }
  void TearDown() override { ckpt::set_rename_exchange_enabled(true); }
};

void save_forever(const std::string& dir) {
  CheckpointOptions options;
  options.max_to_keep = 3;
  CheckpointManager m(dir, options);
  auto last = m.latest();
  for (int64_t step = last ? last->step + 1 : 1;; ++step) {
    m.save(step, content(step, 0));
    if (step % 2 == 0) m.save(step, content(step, 1));
  }
}

TEST_P(RandomKillTest, CommittedCheckpointsAlwaysVerify) {
  constexpr int kKills = 25;
  std::mt19937 gen(12345);
  int64_t newest = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    pid_t child = fork_child([&] {
      save_forever(dir());
      return 0;
    });
    testing::ChildGuard guard(child);
    // Saves take tens of milliseconds (fsyncs), so this lands in every phase of them.
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + gen() % 150000));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = wait_status(child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child stopped by itself: status " << status;

    CheckpointManager m(dir(), {});
    for (const std::string& name : entries(dir())) {
      EXPECT_FALSE(is_uncommitted(name)) << "leftover after cleanup: " << name;
    }
    for (const CheckpointInfo& info : m.list()) {
      Checkpoint c = m.restore(info.step);  // throws if a committed one does not verify
      const std::string& progress = c.files.at("progress");
      int version = progress.back() - '0';
      EXPECT_EQ(c.files, content(info.step, version)) << "step " << info.step;
    }
    if (m.latest()) {
      EXPECT_GE(m.latest()->step, newest) << "a committed checkpoint went missing";
      newest = m.latest()->step;
    }
  }
  EXPECT_GT(newest, 2) << "the children never got far enough for the test to mean much";
}

INSTANTIATE_TEST_SUITE_P(ExchangeOrAside, RandomKillTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Exchange" : "Aside"; });

TEST_F(CrashTest, WriteFileAtomicallySurvivesKills) {
  const std::string path = tmp_.path() + "/state";
  const std::string a(1 << 20, 'a'), b(3 << 20, 'b');
  write_file_atomically(path, a);
  std::mt19937 gen(7);
  for (int kill = 0; kill < 20; ++kill) {
    pid_t child = fork_child([&] {
      for (int i = 0;; ++i) write_file_atomically(path, i % 2 ? a : b);
      return 0;
    });
    testing::ChildGuard guard(child);
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + gen() % 20000));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    ASSERT_TRUE(WIFSIGNALED(wait_status(child)));
    std::string now = read_file(path);
    ASSERT_TRUE(now == a || now == b) << "mixed content of " << now.size() << " bytes";
  }
}

TEST_F(CrashTest, ConcurrentSaversInProcessesDoNotCorruptEachOther) {
  constexpr int kProcs = 4, kSteps = 6;
  CheckpointManager{dir()};  // create the directory before forking
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    children.push_back(fork_child([&, p] {
      CheckpointOptions options;
      options.max_to_keep = 0;
      CheckpointManager m(dir(), options);  // its cleanup runs while others save
      for (int i = 0; i < kSteps; ++i) {
        m.save(p + kProcs * i, content(p + kProcs * i, 0));
        m.save(1000, content(1000, p));  // all fight over one step
      }
      return 0;
    }));
  }
  for (pid_t child : children) EXPECT_TRUE(exited_ok(wait_status(child)));
  CheckpointManager m(dir());
  ASSERT_EQ(m.list().size(), static_cast<size_t>(kProcs * kSteps + 1));
  for (const CheckpointInfo& info : m.list()) {
    Checkpoint c = m.restore(info.step);
    int version = c.files.at("progress").back() - '0';
    EXPECT_EQ(c.files, content(info.step, version));
  }
  for (const std::string& name : entries(dir())) EXPECT_FALSE(is_uncommitted(name)) << name;
}

TEST_F(CrashTest, WaitForNewerWakesWhenAnotherProcessSaves) {
  CheckpointManager m(dir());
  m.save(3, {});
  pid_t child = fork_child([&] {
    std::this_thread::sleep_for(milliseconds(300));
    CheckpointManager(dir()).save(8, content(8, 0));
    return 0;
  });
  auto newer = m.wait_for_newer(3, milliseconds(30000));
  EXPECT_TRUE(exited_ok(wait_status(child)));
  ASSERT_TRUE(newer);
  EXPECT_EQ(newer->step, 8);
  EXPECT_EQ(m.restore(newer->step).files, content(8, 0));
}

}  // namespace
}  // namespace chorus
