#include "util/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "chorus/error.h"

namespace chorus {

TEST(Env, ParsesIntegersAndRejectsGarbage) {
  setenv("CHORUS_TEST_INT", "42", 1);
  EXPECT_EQ(env_int_or("CHORUS_TEST_INT", 7), 42);
  unsetenv("CHORUS_TEST_INT");
  EXPECT_EQ(env_int_or("CHORUS_TEST_INT", 7), 7);
  setenv("CHORUS_TEST_INT", "4x", 1);
  try {
    env_int("CHORUS_TEST_INT");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("CHORUS_TEST_INT='4x' is not an integer"),
              std::string::npos);
  }
  unsetenv("CHORUS_TEST_INT");
}

TEST(Env, TimeoutFromEnvironment) {
  setenv("CHORUS_TIMEOUT_SECONDS", "2.5", 1);
  EXPECT_EQ(default_timeout().count(), 2500);
  setenv("CHORUS_TIMEOUT_SECONDS", "-1", 1);
  EXPECT_THROW(default_timeout(), InvalidArgument);
  unsetenv("CHORUS_TIMEOUT_SECONDS");
  EXPECT_EQ(default_timeout().count(), 60000);
}

}  // namespace chorus
