// chorus.torch's DistributedOptimizer reduces gradients with the C++ optimizer's
// GradientReducer (src/torch/gradient_reducer.h): its hooks run in C++ during backward,
// without the GIL. Here: the reducer on a process set's engine, its hooks' errors raised
// from backward() as Python exceptions, its wait interruptible, and every reducer detached
// when the world it reduces over goes (shutdown, elastic re-forming).
#include <torch/csrc/Exceptions.h>    // python_error
#include <torch/csrc/utils/pybind.h>  // torch.Tensor <-> at::Tensor

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "chorus/error.h"
#include "errors.h"
#include "torch/gradient_reducer.h"

namespace py = pybind11;

namespace chorus::python {
namespace {

// Every reducer alive, so that shutdown can detach them.
struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<detail::GradientReducer>> reducers;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: usable at interpreter exit
  return *r;
}

// What a hook threw, as the Python exception autograd re-raises from backward(): Horovod's
// AssertionError for a gradient computed too often, else as any call's error.
[[noreturn]] void raise_from_hook(std::exception_ptr error) {
  {
    py::gil_scoped_acquire gil;
    try {
      std::rethrow_exception(error);
    } catch (const detail::TooManyBackwardPasses& e) {
      PyErr_SetString(PyExc_AssertionError, e.what());
    } catch (...) {
      set_python_error(std::current_exception());
    }
  }
  ::python_error raised;
  raised.persist();  // takes the error set above, for autograd to restore in the caller
  throw raised;
}

// The reducer and the process set whose engine it uses (kept alive with it).
class PyReducer {
 public:
  PyReducer(const std::vector<std::pair<std::string, at::Tensor>>& params, int op, double predivide,
            int passes, int64_t bucket_bytes, int set_id, const std::string& name_prefix) {
    CHORUS_CHECK_ARG(bucket_bytes >= 0, "bucket_bytes must be >= 0, not ", bucket_bytes);
    CHORUS_CHECK_ARG(op == 0 || op == 1, "the reducer averages (0) or sums (1), not op ", op);
    DistributedOptimizerOptions o;
    o.op = op == 1 ? ReduceOp::kSum : ReduceOp::kAverage;  // Horovod's values
    o.gradient_predivide_factor = predivide;
    o.backward_passes_per_step = passes;
    o.bucket_bytes = static_cast<size_t>(bucket_bytes);
    o.name_prefix = name_prefix;
    set_ = process_set_for_op(set_id);
    if (set_id != 0) o.engine = &set_->engine();  // nullptr: the world's, where the heap is
    std::vector<detail::GradientReducer::Param> reduced;
    for (const auto& [name, tensor] : params) reduced.push_back({name, tensor});
    {
      py::gil_scoped_release no_gil;  // allocating the buckets is collective
      reducer_ = std::make_shared<detail::GradientReducer>(std::move(reduced), std::move(o),
                                                           &raise_from_hook);
    }
    std::lock_guard<std::mutex> lock(registry().mu);
    auto& all = registry().reducers;
    all.erase(std::remove_if(all.begin(), all.end(), [](const auto& w) { return w.expired(); }),
              all.end());
    all.push_back(reducer_);
  }

  ~PyReducer() {
    py::gil_scoped_release no_gil;  // waits for what is in flight
    reducer_.reset();
  }

  detail::GradientReducer& get() {
    CHORUS_CHECK_ARG(!reducer_->detached(),
                     "the optimizer's reducer was detached: chorus was shut down since");
    return *reducer_;
  }

  void submit_remaining() {
    detail::GradientReducer& r = get();
    py::gil_scoped_release no_gil;  // may wait for the buckets' memory the first time
    r.submit_remaining();
  }

  // After submit_remaining() (chorus.torch's synchronize() reduces the sparse gradients it
  // names in between): waits interruptibly, then raises what the reductions threw.
  void synchronize() {
    detail::GradientReducer& r = get();
    wait_interruptibly([&](std::chrono::milliseconds t) { return r.wait_for(t); });
    try {
      py::gil_scoped_release no_gil;
      r.synchronize();
    } catch (const Error&) {
      raise_collective_error(std::current_exception());
    }
  }

  bool detached() const { return reducer_->detached(); }

 private:
  std::shared_ptr<ProcessSet> set_;
  std::shared_ptr<detail::GradientReducer> reducer_;
};

}  // namespace

void detach_gradient_reducers() {
  std::vector<std::shared_ptr<detail::GradientReducer>> alive;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    for (const auto& weak : registry().reducers) {
      if (auto r = weak.lock()) alive.push_back(std::move(r));
    }
    registry().reducers.clear();
  }
  for (const auto& r : alive) r->detach();
}

void define_reducer(py::module_& m) {
  py::class_<PyReducer>(m, "GradientReducer",
                        "DistributedOptimizer's hooks, buckets and waits, in C++.")
      .def(py::init<const std::vector<std::pair<std::string, at::Tensor>>&, int, double, int,
                    int64_t, int, const std::string&>(),
           py::arg("params"), py::arg("op"), py::arg("gradient_predivide_factor"),
           py::arg("backward_passes_per_step"), py::arg("bucket_bytes"), py::arg("process_set_id"),
           py::arg("name_prefix"))
      .def("submit_remaining", &PyReducer::submit_remaining)
      .def("synchronize", &PyReducer::synchronize)
      .def("next_round", [](PyReducer& r) { r.get().next_round(); })
      .def("in_flight", [](PyReducer& r) { return r.get().in_flight(); })
      .def("sparse_params", [](PyReducer& r) { return r.get().sparse_params(); })
      .def("buckets_active",
           [](PyReducer& r) {
             detail::GradientReducer& g = r.get();
             py::gil_scoped_release no_gil;
             return g.buckets_active();
           })
      .def("in_bucket", [](PyReducer& r, size_t i) { return r.get().in_bucket(i); })
      .def("set_backward_passes_per_step",
           [](PyReducer& r, int passes) { r.get().set_backward_passes_per_step(passes); })
      .def("detached", &PyReducer::detached);
}

}  // namespace chorus::python
