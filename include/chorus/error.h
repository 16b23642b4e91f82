// Errors raised by chorus. The type says what the caller should do:
//   IoError          a peer or the store is gone (closed, killed, reset, refused);
//                    the communicator is broken: destroy it and create a new one.
//   TimeoutError     a blocking call did not finish within its timeout
//                    (CHORUS_TIMEOUT_SECONDS); the communicator is broken as above.
//   AuthError        a connection failed authentication (wrong secret, garbage);
//                    an IoError, as the connection is dropped.
//   UnavailableError a service the job cannot run without (a parameter server) is gone;
//                    an IoError: restart the job from its last checkpoint.
//   InvalidArgument  the caller broke a documented requirement; nothing was sent.
// Messages start with "[file:line]" and name the rank, peer, operation and size
// where they are known.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace chorus {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class IoError : public Error {
 public:
  using Error::Error;
};

class AuthError : public IoError {
 public:
  using IoError::IoError;
};

class UnavailableError : public IoError {
 public:
  using IoError::IoError;
};

class TimeoutError : public Error {
 public:
  using Error::Error;
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Args>
std::string make_message(const char* file, int line, const Args&... args) {
  std::ostringstream out;
  const char* base = file;
  for (const char* p = file; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  out << '[' << base << ':' << line << "] ";
  (out << ... << args);
  return out.str();
}

}  // namespace detail
}  // namespace chorus

// Throws `Type` with a "[file:line] " prefix and the streamed arguments.
#define CHORUS_THROW(Type, ...) \
  throw Type(::chorus::detail::make_message(__FILE__, __LINE__, __VA_ARGS__))

// Throws InvalidArgument unless `cond` holds.
#define CHORUS_CHECK_ARG(cond, ...)                                    \
  do {                                                                 \
    if (!(cond)) CHORUS_THROW(::chorus::InvalidArgument, __VA_ARGS__); \
  } while (0)
