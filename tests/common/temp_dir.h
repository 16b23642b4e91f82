// A fresh directory under $TMPDIR for one test, removed with everything in it on
// destruction. Shared by every test folder (included as "../common/temp_dir.h").
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace chorus::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("chorus-" + tag + "-XXXXXX")).string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace chorus::testing
