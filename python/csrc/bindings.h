// The parts of the chorus.torch._ops extension module, each defined in its own file.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "chorus/engine.h"

namespace chorus::python {

// init, shutdown, rank ..., process sets, timeline (runtime.cc).
void define_runtime(pybind11::module_& m);
// The collectives, poll, synchronize, join, barrier (collectives.cc).
void define_collectives(pybind11::module_& m);

// chorus.torch.BatchBalancer and BatchShare (balance.cc).
void define_balance(pybind11::module_& m);
// chorus.torch.elastic's re-forming and round queries (elastic.cc).
void define_elastic(pybind11::module_& m);
// The registered process set `id`, for an op: ValueError (InvalidArgument) when it does not
// exist or this rank is not a member.
std::shared_ptr<ProcessSet> process_set_for_op(int id);

}  // namespace chorus::python
