// The parts of the chorus.torch._ops extension module, each defined in its own file.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <functional>
#include <memory>

#include "chorus/engine.h"

namespace chorus::python {

// init, shutdown, rank ..., process sets, timeline (runtime.cc).
void define_runtime(pybind11::module_& m);
// The collectives, poll, synchronize, join, barrier (collectives.cc).
void define_collectives(pybind11::module_& m);

// DistributedOptimizer's gradient reduction in C++ (reducer.cc).
void define_reducer(pybind11::module_& m);
// Detaches every reducer from the engine (its hooks removed): shutdown and re-forming.
void detach_gradient_reducers();

// chorus.torch.BatchBalancer and BatchShare (balance.cc).
void define_balance(pybind11::module_& m);
// chorus.torch.elastic's re-forming and round queries (elastic.cc).
void define_elastic(pybind11::module_& m);
// The registered process set `id`, for an op: ValueError (InvalidArgument) when it does not
// exist or this rank is not a member.
std::shared_ptr<ProcessSet> process_set_for_op(int id);
// Calls wait_for(slice) with the GIL released until it returns true: a pending signal
// (Ctrl-C) raises in between, and the whole wait is bounded by CHORUS_TIMEOUT_SECONDS
// (CollectiveTimeout; the op then stays pending).
void wait_interruptibly(const std::function<bool(std::chrono::milliseconds)>& wait_for);

}  // namespace chorus::python
