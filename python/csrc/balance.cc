// chorus.torch.BatchBalancer: each step's global batch split among the ranks by speed
// (include/chorus/torch/batch_balancer.h, docs/torch.md). No libtorch here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "chorus/error.h"
#include "chorus/torch/batch_balancer.h"
#include "chorus/torch/runtime.h"

namespace py = pybind11;

namespace chorus::python {
namespace {

// The C++ balancer refers to the engine of the init() it was made under: refuse it after
// shutdown() or a new init() instead of touching a stopped engine.
class Balancer {
 public:
  Balancer(double min_share, const std::string& name) {
    CHORUS_CHECK_ARG(initialized(), "chorus has not been initialized; use hvd.init()");
    engine_ = &default_engine();
    BatchBalancerOptions options;
    options.min_share = min_share;
    options.name = name;
    options.engine = engine_;
    balancer_ = std::make_unique<BatchBalancer>(options);
  }
  BatchShare next(int64_t rows) {
    check();
    py::gil_scoped_release no_gil;
    return balancer_->next(rows);
  }
  void record(double seconds) {
    check();
    balancer_->record(seconds);
  }
  std::vector<int64_t> last_rows() const { return balancer_->last_rows(); }

 private:
  void check() const {
    CHORUS_CHECK_ARG(initialized() && &default_engine() == engine_,
                     "BatchBalancer: made under an earlier init(); make a new one");
  }
  Engine* engine_ = nullptr;
  std::unique_ptr<BatchBalancer> balancer_;
};

}  // namespace

void define_balance(py::module_& m) {
  py::class_<BatchShare>(m, "BatchShare", "This rank's rows [begin, end) of a global batch.")
      .def_readonly("begin", &BatchShare::begin)
      .def_readonly("end", &BatchShare::end)
      .def_readonly("loss_scale", &BatchShare::loss_scale,
                    "Multiply this rank's mean loss by it before backward.")
      .def_property_readonly("rows", &BatchShare::rows)
      .def("__repr__", [](const BatchShare& s) {
        return "BatchShare(begin=" + std::to_string(s.begin) + ", end=" + std::to_string(s.end) +
               ", loss_scale=" + std::to_string(s.loss_scale) + ")";
      });
  py::class_<Balancer>(m, "BatchBalancer",
                       "Splits each step's global batch among the ranks by the speed each "
                       "showed in the step before (docs/torch.md).")
      .def(py::init<double, const std::string&>(),
           py::arg("min_share") = BatchBalancerOptions{}.min_share,
           py::arg("name") = BatchBalancerOptions{}.name)
      .def("next", &Balancer::next, py::arg("rows"),
           "This rank's share of the coming step's global batch of `rows`.")
      .def("record", &Balancer::record, py::arg("seconds"),
           "This rank's forward and backward time for its share.")
      .def_property_readonly("last_rows", &Balancer::last_rows);
}

}  // namespace chorus::python
