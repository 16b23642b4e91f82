// CheckpointManager in one process: round trips, retention, ordering, replacement,
// corruption and fallback, argument checking, remove_all, wait_for_newer with a thread,
// and the single-file helpers.
#include "chorus/train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "chorus/error.h"
#include "test_util.h"
#include "train/checkpoint/commit.h"
#include "util/log.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using testing::entries;
using testing::raw_read;
using testing::raw_write;
using Files = std::map<std::string, std::string>;

std::vector<int64_t> steps_of(const std::vector<CheckpointInfo>& infos) {
  std::vector<int64_t> steps;
  for (const auto& i : infos) steps.push_back(i.step);
  return steps;
}

std::string all_byte_values() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  return s + std::string(10, '\0') + s;
}

class CheckpointTest : public ::testing::Test {
 protected:
  std::string dir() const { return tmp_.path() + "/run/checkpoints"; }
  CheckpointManager manager(int max_to_keep = 5) {
    CheckpointOptions options;
    options.max_to_keep = max_to_keep;
    return CheckpointManager(dir(), options);
  }
  testing::TempDir tmp_;
};

TEST_F(CheckpointTest, RoundTripKeepsEveryByte) {
  CheckpointManager m = manager();
  Files files{{"empty", ""},
              {"binary.bin", all_byte_values()},
              {"model.pt", testing::random_bytes(5 << 20, 1)},
              {"rng_state", "\0\1\2"}};
  std::string path = m.save(3, files);
  EXPECT_EQ(path, dir() + "/ckpt-3");
  EXPECT_EQ(entries(path),
            (std::vector<std::string>{"MANIFEST", "binary.bin", "empty", "model.pt", "rng_state"}));
  Checkpoint c = m.restore(3);
  EXPECT_EQ(c.step, 3);
  EXPECT_EQ(c.path, path);
  EXPECT_EQ(c.files, files);
  // Nothing but the checkpoint is left in the directory.
  EXPECT_EQ(entries(dir()), std::vector<std::string>{"ckpt-3"});
}

TEST_F(CheckpointTest, CheckpointWithoutFilesRoundTrips) {
  CheckpointManager m = manager();
  m.save(0, {});
  EXPECT_TRUE(m.restore(0).files.empty());
}

TEST_F(CheckpointTest, ListIsNumericNotLexicographic) {
  CheckpointManager m = manager(0);
  for (int64_t step : {100, 9, 10}) m.save(step, {{"s", std::to_string(step)}});
  EXPECT_EQ(steps_of(m.list()), (std::vector<int64_t>{9, 10, 100}));
  ASSERT_TRUE(m.latest());
  EXPECT_EQ(m.latest()->step, 100);
  EXPECT_EQ(m.latest()->path, dir() + "/ckpt-100");
  EXPECT_EQ(m.restore_latest()->files.at("s"), "100");
}

TEST_F(CheckpointTest, EmptyDirectoryHasNothing) {
  CheckpointManager m = manager();
  EXPECT_TRUE(m.list().empty());
  EXPECT_FALSE(m.latest());
  EXPECT_FALSE(m.restore_latest());
}

TEST_F(CheckpointTest, MaxToKeepDeletesTheOldest) {
  CheckpointManager m = manager(2);
  for (int64_t step = 1; step <= 5; ++step) m.save(step, {{"x", "y"}});
  EXPECT_EQ(steps_of(m.list()), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(entries(dir()), (std::vector<std::string>{"ckpt-4", "ckpt-5"}));  // no leftovers
}

TEST_F(CheckpointTest, MaxToKeepAlwaysKeepsTheOneJustSaved) {
  CheckpointManager m = manager(2);
  m.save(10, {});
  m.save(20, {});
  m.save(5, {});  // lower than the others: still kept, with the newest other
  EXPECT_EQ(steps_of(m.list()), (std::vector<int64_t>{5, 20}));
}

TEST_F(CheckpointTest, MaxToKeepZeroKeepsAll) {
  CheckpointManager m = manager(0);
  for (int64_t step = 1; step <= 7; ++step) m.save(step, {});
  EXPECT_EQ(m.list().size(), 7u);
}

TEST_F(CheckpointTest, OtherPrefixesAreIgnored) {
  CheckpointManager a = manager(1);
  CheckpointOptions options;
  options.prefix = "ckpt-tmp";  // looks like our temporary names; must not be confused
  options.max_to_keep = 1;
  CheckpointManager b(dir(), options);
  a.save(1, {});
  b.save(7, {});
  a.save(2, {});
  EXPECT_EQ(steps_of(a.list()), std::vector<int64_t>{2});
  EXPECT_EQ(steps_of(b.list()), std::vector<int64_t>{7});
  CheckpointManager again(dir(), options);  // its cleanup leaves the other prefix alone
  EXPECT_EQ(steps_of(a.list()), std::vector<int64_t>{2});
}

class ReplaceTest : public CheckpointTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override { ckpt::set_rename_exchange_enabled(GetParam()); }
  void TearDown() override { ckpt::set_rename_exchange_enabled(true); }
};

TEST_P(ReplaceTest, SameStepIsReplaced) {
  CheckpointManager m = manager();
  m.save(7, {{"a", "old"}, {"b", "only in the old one"}});
  m.save(7, {{"a", "new"}});
  EXPECT_EQ(m.restore(7).files, (Files{{"a", "new"}}));
  EXPECT_EQ(entries(dir()), std::vector<std::string>{"ckpt-7"});
}

INSTANTIATE_TEST_SUITE_P(ExchangeOrAside, ReplaceTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Exchange" : "Aside"; });

// --- corruption of the newest checkpoint ------------------------------------------------

struct Corruption {
  const char* name;
  std::function<void(const std::string& ckpt_dir)> apply;
  const char* expected;  // in the error and in the warning
};

class CorruptionTest : public CheckpointTest, public ::testing::WithParamInterface<Corruption> {};

TEST_P(CorruptionTest, RestoreLatestFallsBackAndWarns) {
  CheckpointManager m = manager();
  m.save(1, {{"model.bin", std::string(1000, 'a')}, {"opt.bin", "one"}});
  std::string newest = m.save(2, {{"model.bin", std::string(1000, 'b')}, {"opt.bin", "two"}});
  GetParam().apply(newest);

  ASSERT_EQ(m.latest()->step, 2);  // still listed: list() does not verify
  ::testing::internal::CaptureStderr();
  std::optional<Checkpoint> restored = m.restore_latest();
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(restored);
  EXPECT_EQ(restored->step, 1);
  EXPECT_EQ(restored->files.at("opt.bin"), "one");
  if (log_enabled(LogLevel::kWarning)) {
    EXPECT_NE(log.find("WARNING [checkpoint]"), std::string::npos) << log;
    EXPECT_NE(log.find(newest), std::string::npos) << log;
    EXPECT_NE(log.find(GetParam().expected), std::string::npos) << log;
  }
}

TEST_P(CorruptionTest, RestoreOfTheCorruptStepNamesTheProblem) {
  CheckpointManager m = manager();
  m.save(1, {{"model.bin", "a"}});
  std::string newest = m.save(2, {{"model.bin", std::string(1000, 'b')}, {"opt.bin", "two"}});
  GetParam().apply(newest);
  try {
    m.restore(2);
    FAIL() << "a corrupt checkpoint was restored";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().expected), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(newest), std::string::npos) << e.what();
  }
}

void flip_byte(const std::string& path, size_t offset) {
  std::string bytes = raw_read(path);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] ^= 0x20;
  raw_write(path, bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CorruptionTest,
    ::testing::Values(
        Corruption{"FlippedByte", [](const std::string& d) { flip_byte(d + "/model.bin", 500); },
                   "file 'model.bin' is corrupt: its SHA-256 is"},
        Corruption{"Truncated",
                   [](const std::string& d) { ::truncate((d + "/model.bin").c_str(), 999); },
                   "file 'model.bin' has 999 bytes, the manifest says 1000"},
        Corruption{"Grown", [](const std::string& d) { raw_write(d + "/opt.bin", "two!"); },
                   "file 'opt.bin' has 4 bytes, the manifest says 3"},
        Corruption{"Deleted", [](const std::string& d) { std::filesystem::remove(d + "/opt.bin"); },
                   "file 'opt.bin' is missing"},
        Corruption{"ManifestFlipped", [](const std::string& d) { flip_byte(d + "/MANIFEST", 60); },
                   "MANIFEST is corrupt"},
        Corruption{"ManifestTruncated",
                   [](const std::string& d) { ::truncate((d + "/MANIFEST").c_str(), 50); },
                   "MANIFEST is corrupt"},
        Corruption{"ManifestGarbage",
                   [](const std::string& d) { raw_write(d + "/MANIFEST", std::string(70, '\0')); },
                   "MANIFEST is corrupt"},
        Corruption{"ManifestEmpty", [](const std::string& d) { raw_write(d + "/MANIFEST", ""); },
                   "MANIFEST is corrupt"},
        Corruption{"FileReplacedBySymlink",
                   [](const std::string& d) {
                     std::filesystem::remove(d + "/opt.bin");
                     std::filesystem::create_symlink("/etc/hostname", d + "/opt.bin");
                   },
                   "file 'opt.bin' is a symlink"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(CheckpointTest, DirectoryWithoutManifestIsNotCommitted) {
  CheckpointManager m = manager();
  m.save(1, {{"a", "1"}});
  std::string newest = m.save(2, {{"a", "2"}});
  std::filesystem::remove(newest + "/MANIFEST");
  EXPECT_EQ(steps_of(m.list()), std::vector<int64_t>{1});
  EXPECT_EQ(m.restore_latest()->step, 1);
}

TEST_F(CheckpointTest, ManifestOfAnotherStepIsRejected) {
  CheckpointManager m = manager(0);
  m.save(1, {{"a", "1"}});
  m.save(2, {{"a", "2"}});
  std::filesystem::remove_all(dir() + "/ckpt-2");
  std::filesystem::rename(dir() + "/ckpt-1", dir() + "/ckpt-2");  // a copy under a wrong name
  EXPECT_THROW(
      {
        try {
          m.restore(2);
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("MANIFEST is of step 1"), std::string::npos);
          throw;
        }
      },
      InvalidArgument);
}

TEST_F(CheckpointTest, AllCorruptGivesNothing) {
  CheckpointManager m = manager();
  for (int64_t step : {1, 2}) flip_byte(m.save(step, {{"a", "hello"}}) + "/a", 0);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(m.restore_latest());
  std::string log = ::testing::internal::GetCapturedStderr();
  if (log_enabled(LogLevel::kWarning)) {
    EXPECT_NE(log.find("step 1"), std::string::npos) << log;
    EXPECT_NE(log.find("step 2"), std::string::npos) << log;
  }
}

// --- arguments and errors ---------------------------------------------------------------

void expect_invalid(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no InvalidArgument (expected '" << fragment << "')";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, BadFileNamesAreRejectedBeforeWriting) {
  CheckpointManager m = manager();
  const std::vector<std::string> bad = {"",
                                        ".",
                                        "..",
                                        "MANIFEST",
                                        "a/b",
                                        "../up",
                                        "a b",
                                        "tab\t",
                                        "caf\xc3\xa9",
                                        std::string(256, 'x'),
                                        std::string("nul\0", 4)};
  for (const std::string& name : bad) {
    expect_invalid([&] { m.save(1, {{"ok", "1"}, {name, "x"}}); }, "bad file name");
  }
  EXPECT_TRUE(entries(dir()).empty());  // not even a temporary directory
  m.save(1, {{std::string(255, 'x'), ""}, {".hidden", ""}, {"A-z_0.9", ""}});  // all valid
}

TEST_F(CheckpointTest, NegativeStepsAreRejected) {
  CheckpointManager m = manager();
  expect_invalid([&] { m.save(-1, {}); }, "step must be >= 0, got -1");
  expect_invalid([&] { m.restore(-5); }, "step must be >= 0, got -5");
  EXPECT_TRUE(entries(dir()).empty());
}

TEST_F(CheckpointTest, MissingStepIsInvalidArgument) {
  CheckpointManager m = manager();
  m.save(1, {});
  expect_invalid([&] { m.restore(2); }, "no checkpoint of step 2");
}

TEST_F(CheckpointTest, BadOptionsAreRejected) {
  CheckpointOptions options;
  options.max_to_keep = -1;
  expect_invalid([&] { CheckpointManager(dir(), options); }, "max_to_keep");
  for (const char* prefix : {"", ".hidden", "a/b", "MANIFEST"}) {
    options = {};
    options.prefix = prefix;
    expect_invalid([&] { CheckpointManager(dir(), options); }, "bad prefix");
  }
  expect_invalid([&] { CheckpointManager(""); }, "directory is empty");
}

TEST_F(CheckpointTest, DirectoryThatIsAFileIsIoError) {
  raw_write(tmp_.path() + "/file", "x");
  EXPECT_THROW(CheckpointManager(tmp_.path() + "/file"), IoError);
  EXPECT_THROW(CheckpointManager(tmp_.path() + "/file/sub"), IoError);
}

TEST_F(CheckpointTest, UnwritableDirectoryIsIoErrorWithPath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores permissions";
  CheckpointManager m = manager();
  ::chmod(dir().c_str(), 0500);
  try {
    m.save(1, {{"a", "b"}});
    ADD_FAILURE() << "saved into a read-only directory";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(dir()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
  }
  ::chmod(dir().c_str(), 0700);
}

TEST_F(CheckpointTest, ThrowingBeforeCommitLeavesNothing) {
  CheckpointOptions options;
  std::string seen;
  options.before_commit = [&](const std::string& temp) {
    seen = temp;
    EXPECT_TRUE(std::filesystem::exists(temp + "/MANIFEST"));
    throw std::runtime_error("stop");
  };
  CheckpointManager m(dir(), options);
  EXPECT_THROW(m.save(4, {{"a", "b"}}), std::runtime_error);
  EXPECT_NE(seen.find("/.ckpt-tmp-4-"), std::string::npos) << seen;
  EXPECT_TRUE(entries(dir()).empty());
}

// --- leftovers, remove_all ----------------------------------------------------------------

TEST_F(CheckpointTest, ConstructionCleansLeftovers) {
  CheckpointManager(dir()).save(3, {{"a", "3"}});
  CheckpointManager(dir()).save(4, {{"a", "4"}});
  // A replaced step 3 whose replacement never committed: must come back.
  std::filesystem::rename(dir() + "/ckpt-3", dir() + "/.ckpt-old-3-1-0123456789abcdef");
  // A replaced step 4 whose replacement did commit: must go.
  std::filesystem::copy(dir() + "/ckpt-4", dir() + "/.ckpt-old-4-1-0123456789abcdef");
  std::filesystem::create_directory(dir() + "/.ckpt-tmp-5-1-0123456789abcdef");  // unlocked
  std::filesystem::create_directory(dir() + "/.ckpt-del-1-0123456789abcdef");
  raw_write(dir() + "/.ckpt-del-1-0123456789abcdef/x", "x");
  std::filesystem::create_directory(dir() + "/.ckpt-tmp-junk");  // not ours: left alone
  CheckpointManager m(dir());
  EXPECT_EQ(entries(dir()), (std::vector<std::string>{".ckpt-tmp-junk", "ckpt-3", "ckpt-4"}));
  EXPECT_EQ(m.restore(3).files.at("a"), "3");
  EXPECT_EQ(m.restore(4).files.at("a"), "4");
}

TEST_F(CheckpointTest, RemoveAllRemovesCheckpointsAndTheDirectory) {
  CheckpointManager m = manager(0);
  for (int64_t step = 1; step <= 3; ++step) m.save(step, {{"a", "b"}});
  std::filesystem::create_directory(dir() + "/.ckpt-tmp-9-1-0123456789abcdef");
  m.remove_all();
  EXPECT_FALSE(std::filesystem::exists(dir()));
  EXPECT_TRUE(m.list().empty());
  EXPECT_FALSE(m.restore_latest());
}

TEST_F(CheckpointTest, RemoveAllKeepsWhatIsNotOurs) {
  CheckpointManager m = manager();
  CheckpointOptions other;
  other.prefix = "eval";
  CheckpointManager e(dir(), other);
  m.save(1, {});
  e.save(1, {});
  raw_write(dir() + "/notes.txt", "mine");
  m.remove_all();
  EXPECT_EQ(entries(dir()), (std::vector<std::string>{"eval-1", "notes.txt"}));
}

// --- wait_for_newer with a thread ---------------------------------------------------------

TEST_F(CheckpointTest, WaitForNewerWakesOnSave) {
  CheckpointManager m = manager();
  m.save(1, {});
  std::thread saver([&] {
    std::this_thread::sleep_for(milliseconds(200));
    CheckpointManager(dir()).save(2, {{"a", "b"}});
  });
  auto start = std::chrono::steady_clock::now();
  auto newer = m.wait_for_newer(1, milliseconds(30000));
  auto waited = std::chrono::steady_clock::now() - start;
  saver.join();
  ASSERT_TRUE(newer);
  EXPECT_EQ(newer->step, 2);
  EXPECT_GE(waited, milliseconds(150));
  EXPECT_LT(waited, milliseconds(10000));
}

TEST_F(CheckpointTest, WaitForNewerReturnsAtOnceWhenOneExists) {
  CheckpointManager m = manager();
  m.save(5, {});
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(m.wait_for_newer(4, milliseconds(30000))->step, 5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

TEST_F(CheckpointTest, WaitForNewerTimesOut) {
  CheckpointManager m = manager();
  m.save(5, {});
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(m.wait_for_newer(5, milliseconds(300)));
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_LT(waited, milliseconds(10000));
}

// --- single files ---------------------------------------------------------------------------

TEST_F(CheckpointTest, WriteFileAtomicallyReplacesAndLeavesNoTemp) {
  std::string path = tmp_.path() + "/progress.json";
  write_file_atomically(path, "first");
  EXPECT_EQ(read_file(path), "first");
  write_file_atomically(path, all_byte_values());
  EXPECT_EQ(read_file(path), all_byte_values());
  write_file_atomically(path, "");
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(entries(tmp_.path()), std::vector<std::string>{"progress.json"});
}

TEST_F(CheckpointTest, FileHelpersReportIoErrorsWithPath) {
  std::string missing = tmp_.path() + "/nope/file";
  try {
    read_file(missing);
    ADD_FAILURE() << "read a missing file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_file_atomically(missing, "x"), IoError);
  EXPECT_THROW(read_file(tmp_.path()), IoError);  // a directory
  EXPECT_THROW(write_file_atomically(tmp_.path() + "/", "x"), InvalidArgument);
}

}  // namespace
}  // namespace chorus
