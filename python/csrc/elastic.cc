// chorus.torch.elastic's C++ half: re-forming the world and asking about the launcher's
// rounds (chorus/elastic.h). The rest of Horovod's elastic API is Python
// (python/chorus/torch/elastic.py). No libtorch here.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "chorus/elastic.h"
#include "chorus/job.h"
#include "chorus/torch/runtime.h"
#include "pending_ops.h"

namespace py = pybind11;

namespace chorus::python {

void define_elastic(py::module_& m) {
  m.def(
      "elastic_enabled", [] { return initialized() && detail::job().elastic(); },
      "Whether this process is a worker of an elastic job (chorusrun --min-np ...).");
  m.def("elastic_hosts_updated", [] {
    py::gil_scoped_release no_gil;
    return elastic::hosts_updated();
  });
  m.def("elastic_world_failed", [] { return initialized() && elastic::world_failed(); });
  m.def("elastic_reform", [] {
    pending_ops().clear();  // handles of the old world's ops
    py::gil_scoped_release no_gil;
    detail::reform_world();
    detach_gradient_reducers();
  });
}

}  // namespace chorus::python
