// FileStore specifics: directory mode, integrity of value files, and add() across
// independent store objects (as separate processes would be).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "chorus/error.h"
#include "chorus/store.h"
#include "rendezvous/crypto.h"
#include "rendezvous/frame.h"
#include "test_util.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

// The one value file in `dir` (the test stores a single key).
std::string only_value_file(const std::string& dir) {
  std::string found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("k-", 0) == 0) {
      EXPECT_TRUE(found.empty()) << "more than one value file";
      found = entry.path().string();
    }
  }
  return found;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void expect_integrity_error(FileStore& store, const std::string& key) {
  try {
    store.get(key, milliseconds(100));
    FAIL() << "a damaged value file was accepted";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("integrity check"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
  }
}

class FileStoreTest : public ::testing::Test {
 protected:
  std::string dir() const { return tmp_.path() + "/store"; }
  testing::TempDir tmp_;
  Secret secret_ = Secret::generate();
};

TEST_F(FileStoreTest, CreatesItsDirectoryOwnerOnly) {
  FileStore store(dir(), secret_);
  struct stat st {};
  ASSERT_EQ(::stat(dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(FileStoreTest, FlippedByteIsRejected) {
  FileStore store(dir(), secret_);
  store.set("addr", "10.0.0.1:29500");
  std::string path = only_value_file(dir());
  std::string bytes = read_all(path);
  bytes[bytes.find("10.0.0.1")] = '6';  // redirect rank 0 to an attacker's address
  write_all(path, bytes);
  expect_integrity_error(store, "addr");
}

TEST_F(FileStoreTest, TruncatedFileIsRejected) {
  FileStore store(dir(), secret_);
  store.set("addr", std::string(1000, 'a'));
  std::string path = only_value_file(dir());
  write_all(path, read_all(path).substr(0, 500));
  expect_integrity_error(store, "addr");
  write_all(path, "");
  expect_integrity_error(store, "addr");
}

TEST_F(FileStoreTest, FileMovedToAnotherKeysNameIsRejected) {
  FileStore store(dir(), secret_);
  store.set("victim", "x");
  std::string victim_file = only_value_file(dir());
  store.set("other", "evil");
  std::string other_file;
  for (const auto& e : fs::directory_iterator(dir())) {
    if (e.path().string() != victim_file && e.path().filename().string().rfind("k-", 0) == 0) {
      other_file = e.path().string();
    }
  }
  ASSERT_FALSE(other_file.empty());
  fs::copy_file(other_file, victim_file, fs::copy_options::overwrite_existing);
  expect_integrity_error(store, "victim");
}

// A file with a valid MAC (so only a secret holder could write it) whose lengths add up only
// modulo 2^64: key length 5 over a 4-byte remainder, value length 2^64 - 1. The sum check
// used to pass, and substr() then threw std::out_of_range instead of a chorus error.
TEST_F(FileStoreTest, LengthsThatWrapAroundAreRejected) {
  FileStore store(dir(), secret_);
  store.set("kkkk", "v");
  std::string path = only_value_file(dir());
  std::string body = rendezvous::PayloadWriter()
                         .u32(0x53464843)  // "CHFS"
                         .u32(1)           // version 1, then the zero u16
                         .u32(5)           // key length: one byte past the end
                         .u32(0xFFFFFFFFu)
                         .u32(0xFFFFFFFFu)  // value length 2^64 - 1
                         .take() +
                     "kkkk";
  write_all(path, body + rendezvous::hmac_sha256(secret_.bytes(),
                                                 std::string("chorus-file-v1", 15) + body));
  try {
    store.get("kkkk", milliseconds(100));
    FAIL() << "a file whose lengths wrap around was accepted";
  } catch (const AuthError& e) {  // an IoError, as for any other damaged file
    EXPECT_NE(std::string(e.what()).find("integrity check (bad lengths)"), std::string::npos)
        << e.what();
  }
}

TEST_F(FileStoreTest, AnotherSecretCannotReadOrForge) {
  FileStore store(dir(), secret_);
  store.set("k", "v");
  FileStore intruder(dir(), Secret::generate());
  expect_integrity_error(intruder, "k");
  intruder.set("k", "forged");
  expect_integrity_error(store, "k");
}

TEST_F(FileStoreTest, AddIsAtomicAcrossProcesses) {
  constexpr int kChildren = 4, kAdds = 50;
  FileStore(dir(), secret_);  // create the directory before forking
  std::vector<pid_t> children;
  for (int i = 0; i < kChildren; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // child: no gtest assertions, only an exit code
      try {
        FileStore store(dir(), secret_);
        for (int k = 0; k < kAdds; ++k) store.add("count", 1);
        ::_exit(0);
      } catch (...) {
        ::_exit(1);
      }
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  FileStore store(dir(), secret_);
  EXPECT_EQ(store.get("count", milliseconds(100)), std::to_string(kChildren * kAdds));
}

}  // namespace
}  // namespace chorus
