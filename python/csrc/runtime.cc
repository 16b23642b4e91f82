// chorus.torch's process-wide calls: init / shutdown, the job's shape, process sets, what
// was built, the timeline. No libtorch here (only pybind11).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "chorus/communicator.h"
#include "chorus/error.h"
#include "chorus/job.h"
#include "chorus/torch/runtime.h"
#include "comm/mpi_comm.h"
#include "pending_ops.h"

namespace py = pybind11;

namespace chorus::python {
namespace {

bool g_homogeneous = true;

// Whether every host runs as many ranks as this one (Horovod's is_homogeneous).
bool every_host_alike(Engine& engine) {
  int32_t mine = static_cast<int32_t>(local_size());
  Handle h = engine.allgather("chorus.python.local_sizes", &mine, DataType::kInt32, {1});
  h.wait();
  const auto* all = static_cast<const int32_t*>(h.data());
  for (int r = 0; r < engine.size(); ++r) {
    if (all[r] != mine) return false;
  }
  return true;
}

void init_job(const std::vector<std::vector<int>>& process_sets) {
  if (initialized()) return;  // Horovod's init is idempotent
  EngineOptions options = EngineOptions::from_env();
  options.join_mode = JoinMode::kHorovod;
  py::gil_scoped_release no_gil;
  chorus::init(options);
  try {
    g_homogeneous = every_host_alike(default_engine());
    for (const auto& ranks : process_sets) default_engine().add_process_set(ranks);
  } catch (...) {
    chorus::shutdown();
    throw;
  }
}

void shutdown_job() {
  py::gil_scoped_release no_gil;
  chorus::shutdown();
  pending_ops().clear();
  detach_gradient_reducers();  // their reductions failed with the engine: no wait
}

Engine& engine_checked() {
  CHORUS_CHECK_ARG(initialized(), "chorus has not been initialized; use hvd.init()");
  return default_engine();
}

// {id: ranks} of every process set, set 0 (every rank) included.
std::map<int, std::vector<int>> process_set_table() {
  std::map<int, std::vector<int>> out;
  for (const auto& set : engine_checked().process_sets()) out[set->id()] = set->ranks();
  return out;
}

std::shared_ptr<ProcessSet> registered(int id) {
  auto set = engine_checked().process_set(id);
  CHORUS_CHECK_ARG(set != nullptr, "process set ", id, " does not exist or has been removed");
  return set;
}

}  // namespace

std::shared_ptr<ProcessSet> process_set_for_op(int id) {
  auto set = registered(id);
  set->engine();  // InvalidArgument unless this rank is a member
  return set;
}

void define_runtime(py::module_& m) {
  m.def("init", &init_job, py::arg("process_sets") = std::vector<std::vector<int>>{},
        "Joins the job (chorusrun, torchrun, mpirun, Slurm ...) and registers process sets.");
  m.def("shutdown", &shutdown_job);
  m.def("is_initialized", [] { return initialized(); });
  m.def("rank", [] { return engine_checked(), chorus::rank(); });
  m.def("size", [] { return engine_checked(), chorus::size(); });
  m.def("local_rank", [] { return engine_checked(), chorus::local_rank(); });
  m.def("local_size", [] { return engine_checked(), chorus::local_size(); });
  m.def("cross_rank", [] { return engine_checked(), chorus::cross_rank(); });
  m.def("cross_size", [] { return engine_checked(), chorus::cross_size(); });
  m.def("is_homogeneous", [] { return engine_checked(), g_homogeneous; });
  // Horovod's mpi_built / mpi_enabled / mpi_threads_supported: whether this chorus can run
  // its collectives through MPI, whether this job does (CHORUS_TRANSPORT=mpi, as chorusrun
  // --mpi sets), and whether MPI then lets the program's own threads call it too.
  m.def("mpi_built", [] { return comm::MpiComm::available(); });
  m.def("mpi_enabled",
        [] { return initialized() && detail::job().world().options().transport == "mpi"; });
  m.def("mpi_threads_supported", [] { return comm::MpiComm::threads_supported(); });

  m.def("add_process_set", [](std::vector<int> ranks) {
    Engine& e = engine_checked();
    py::gil_scoped_release no_gil;
    return e.add_process_set(std::move(ranks))->id();
  });
  m.def("remove_process_set", [](int id) {
    Engine& e = engine_checked();
    py::gil_scoped_release no_gil;
    e.remove_process_set(id);
  });
  m.def("process_set_table", &process_set_table);
  m.def("process_set_rank", [](int id) {
    auto set = registered(id);
    CHORUS_CHECK_ARG(set->included(), "this process is not part of process set ", id);
    return set->rank();
  });
  m.def("process_set_size", [](int id) { return registered(id)->size(); });

  // For tests: whether [address, address + bytes) lies in memory the world's ranks share
  // (the shared heap, buckets).
  m.def("in_shared_memory", [](uintptr_t address, size_t bytes) {
    engine_checked();
    return detail::job().world().in_shared_memory(reinterpret_cast<const void*>(address), bytes);
  });
  m.def("start_timeline", [](const std::string& path) { engine_checked().start_timeline(path); });
  m.def("stop_timeline", [] { engine_checked().stop_timeline(); });
}

}  // namespace chorus::python
