// chorus.torch._ops: the C++ half of chorus.torch (the Python half is python/chorus/torch).
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "errors.h"

PYBIND11_MODULE(_ops, m) {
  m.doc() = "chorus's engine for Python: collectives on torch tensors, process sets, runtime";
  chorus::python::define_errors(m);
  chorus::python::define_runtime(m);
  chorus::python::define_collectives(m);
  chorus::python::define_reducer(m);
  chorus::python::define_elastic(m);
  chorus::python::define_balance(m);
}
