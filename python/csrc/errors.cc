#include "errors.h"

#include "chorus/error.h"

namespace py = pybind11;

namespace chorus::python {
namespace {

PyObject* g_internal = nullptr;  // HorovodInternalError
PyObject* g_mismatch = nullptr;
PyObject* g_peer = nullptr;
PyObject* g_timeout = nullptr;

PyObject* new_class(py::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string(PyModule_GetName(m.ptr())) + "." + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module keeps a reference
  return cls;
}

[[noreturn]] void raise(PyObject* type, const char* message) {
  PyErr_SetString(type, message);
  throw py::error_already_set();
}

}  // namespace

void define_errors(py::module_& m) {
  g_internal = new_class(m, "HorovodInternalError", PyExc_RuntimeError,
                         "A collective failed (Horovod's name); the subclasses say why.");
  g_mismatch = new_class(m, "MismatchError", g_internal,
                         "The ranks disagreed about a collective (shape, dtype, op, root, "
                         "or an op that cannot run while ranks have joined).");
  g_peer = new_class(m, "PeerError", g_internal,
                     "A peer is gone, or the engine was shut down: the job cannot go on "
                     "with these ranks.");
  g_timeout = new_class(m, "CollectiveTimeout", g_internal,
                        "A wait ran out (CHORUS_TIMEOUT_SECONDS); the op may still be "
                        "pending.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error&) {
      set_python_error(std::current_exception());
    }
  });
}

void set_python_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const TimeoutError& e) {
    PyErr_SetString(g_timeout, e.what());
  } catch (const IoError& e) {
    PyErr_SetString(g_peer, e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_internal, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

void raise_collective_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    raise(g_mismatch, e.what());  // at a wait, the ranks disagreed: not the caller's argument
  } catch (...) {
    set_python_error(std::current_exception());
    throw py::error_already_set();
  }
}

void raise_timeout(const std::string& message) { raise(g_timeout, message.c_str()); }

}  // namespace chorus::python
