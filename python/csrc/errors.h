// The Python exceptions of chorus.torch and how chorus's C++ errors become them.
//
// Horovod raises HorovodInternalError (a RuntimeError) when a collective fails, and
// ValueError for bad arguments; chorus keeps both and says more through subclasses:
//   ValueError            the caller's arguments (C++ InvalidArgument at submission), or
//                         chorus is not initialised;
//   HorovodInternalError  a collective failed; one of
//     MismatchError       the ranks disagree about the op (shape, dtype, op, root ...);
//     PeerError           a peer is gone or the engine was shut down (C++ IoError);
//     CollectiveTimeout   a wait ran out (C++ TimeoutError, CHORUS_TIMEOUT_SECONDS).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>

namespace chorus::python {

// Creates the exception classes in `m` and translates C++ errors thrown by calls into
// ValueError / PeerError / CollectiveTimeout.
void define_errors(pybind11::module_& m);

// Sets (does not raise) the Python error for `error`, thrown by a call: InvalidArgument is
// ValueError, TimeoutError CollectiveTimeout, IoError PeerError, other chorus errors
// HorovodInternalError, anything else RuntimeError. REQUIRES: the GIL.
void set_python_error(std::exception_ptr error);

// Raises the Python error for `error`, which a collective's wait rethrew: InvalidArgument
// becomes MismatchError here (the ranks disagreed), not ValueError.
[[noreturn]] void raise_collective_error(std::exception_ptr error);

// Raises CollectiveTimeout with `message`.
[[noreturn]] void raise_timeout(const std::string& message);

}  // namespace chorus::python
