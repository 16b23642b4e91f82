// Helpers shared by the train/io tests: a temporary directory and whole-file access.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../../common/temp_dir.h"

namespace chorus::testing {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// `bytes` as lowercase hex, for readable golden comparisons.
inline std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// protoc (Debian's protobuf-compiler) serves as an independent protobuf implementation.
inline bool have_protoc() { return std::system("protoc --version >/dev/null 2>&1") == 0; }

// Runs `protoc <args>` in `dir` with `input` on stdin; returns stdout, or "" with a test
// failure when protoc fails.
inline std::string run_protoc(const TempDir& dir, const std::string& args,
                              const std::string& input) {
  const std::string in = dir.file("protoc.in"), out = dir.file("protoc.out");
  write_bytes(in, input);
  const std::string cmd =
      "cd '" + dir.path() + "' && protoc " + args + " < '" + in + "' > '" + out + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << ": " << read_bytes(out);
  return rc == 0 ? read_bytes(out) : "";
}

}  // namespace chorus::testing
