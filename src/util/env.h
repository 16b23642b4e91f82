// Reading environment variables with validation. Every CHORUS_ tunable is read through
// these helpers, and each is listed in the README's table of variables.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace chorus {

// The value, or nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);
// Parsed integer; throws InvalidArgument naming the variable when it is not an integer.
std::optional<int64_t> env_int(const char* name);
int64_t env_int_or(const char* name, int64_t fallback);
double env_double_or(const char* name, double fallback);

// CHORUS_TIMEOUT_SECONDS (default 60): the bound on every blocking wait.
std::chrono::milliseconds default_timeout();

// /tmp/chorus-<uid>, created with mode 0700 if missing: where the tasks of a job on one
// host meet (shared secret files). Throws IoError when it cannot be created and
// InvalidArgument when it exists but is not a directory this user alone may enter.
std::string user_private_dir();

}  // namespace chorus
