#include "chorus/version.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace chorus {
namespace {

TEST(Version, LibraryMatchesHeaderAndIsSemantic) {
  EXPECT_STREQ(version(), CHORUS_VERSION_STRING);
  EXPECT_TRUE(std::regex_match(version(), std::regex(R"(\d+\.\d+\.\d+)"))) << version();
  std::string parts = std::to_string(CHORUS_VERSION_MAJOR) + "." +
                      std::to_string(CHORUS_VERSION_MINOR) + "." +
                      std::to_string(CHORUS_VERSION_PATCH);
  EXPECT_EQ(parts, version());
}

}  // namespace
}  // namespace chorus
