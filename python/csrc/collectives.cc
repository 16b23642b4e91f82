// chorus.torch's collectives: tensors go to the C++ torch layer without copies (the engine
// reads and writes their memory), each submission gets an integer handle, and poll() /
// synchronize() finish them. Waits release the GIL and wake every 50 ms to let Ctrl-C
// through.
#include <torch/csrc/utils/pybind.h>  // torch.Tensor <-> at::Tensor

#include <ATen/Functions.h>

#include <chrono>
#include <optional>

#include "bindings.h"
#include "chorus/error.h"
#include "chorus/torch/runtime.h"
#include "chorus/torch/tensor_ops.h"
#include "errors.h"
#include "pending_ops.h"
#include "util/env.h"

namespace py = pybind11;

namespace chorus::python {
namespace {

// Horovod's reduction op values (hvd.Average ... hvd.Product).
enum HorovodOp : int { kAverage = 0, kSum = 1, kAdasum = 2, kMin = 3, kMax = 4, kProduct = 5 };

// `allreduce`: whether the op is an allreduce, the one op that takes Adasum (as in Horovod).
ReduceOp reduce_op(int op, bool allreduce = false) {
  switch (op) {
    case kAverage:
      return ReduceOp::kAverage;
    case kSum:
      return ReduceOp::kSum;
    case kMin:
      return ReduceOp::kMin;
    case kMax:
      return ReduceOp::kMax;
    case kProduct:
      return ReduceOp::kProduct;
    case kAdasum:
      if (allreduce) return ReduceOp::kAdasum;
      PyErr_SetString(PyExc_NotImplementedError,
                      "chorus runs Adasum in allreduce only: use hvd.Average or hvd.Sum here");
      throw py::error_already_set();
  }
  CHORUS_THROW(InvalidArgument, "unknown reduction op ", op,
               " (use hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product)");
}

void check_input(const at::Tensor& t, const char* op) {
  check_tensor(t, op);
  CHORUS_CHECK_ARG(t.is_contiguous(), "chorus ", op,
                   ": the tensor is not contiguous (call .contiguous() first)");
}

CollectiveOptions options_for(const ProcessSet& set, ReduceOp op = ReduceOp::kAverage,
                              double prescale = 1.0, double postscale = 1.0) {
  CollectiveOptions o;
  o.engine = &set.engine();
  o.op = op;
  o.prescale = prescale;
  o.postscale = postscale;
  return o;
}

// The names of a group's tensors: "<base>.<i>", base the given name or an unnamed one.
std::vector<std::string> group_names(const std::string& name, Engine& engine, const char* op,
                                     size_t n) {
  std::string base = name.empty() ? detail::auto_name(engine, op) : name;
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) names.push_back(base + "." + std::to_string(i));
  return names;
}

// What an op holds while it is pending: its given name(s); unnamed ops hold none (their
// generated names are unique).
std::vector<std::string> held(const std::string& name, const std::vector<std::string>& names) {
  return name.empty() ? std::vector<std::string>{} : names;
}

// Reserves `names` on the set, runs `enqueue` (which returns the engine's handles) and
// records the pending op; the names are given back if enqueue throws.
template <typename Enqueue>
int64_t submit(PendingOp::Kind kind, int set_id, std::vector<std::string> names,
               Enqueue&& enqueue) {
  auto set = process_set_for_op(set_id);
  PendingOps& ops = pending_ops();
  ops.reserve(set_id, names);
  PendingOp op;
  try {
    enqueue(*set, op);
  } catch (...) {
    ops.release(set_id, names);
    throw;
  }
  op.kind = kind;
  op.set = std::move(set);
  op.set_id = set_id;
  op.names = std::move(names);
  return ops.add(std::move(op));
}

// Horovod's errors for Adasum (the engine's ReduceOp::kAdasum), before anything is queued:
// ValueError for a tensor that is not floating-point, NotImplementedError for a number of
// ranks that is no power of 2.
void check_adasum(const std::vector<at::Tensor>& tensors, const ProcessSet& set) {
  for (const auto& t : tensors) {
    CHORUS_CHECK_ARG(at::isFloatingType(t.scalar_type()),
                     "chorus allreduce: Adasum needs floating-point tensors, got ",
                     c10::toString(t.scalar_type()));
  }
  const int ranks = set.size();
  if ((ranks & (ranks - 1)) != 0) {
    PyErr_SetString(PyExc_NotImplementedError,
                    ("chorus runs Adasum on a power-of-2 number of ranks, as Horovod does; "
                     "this process set has " +
                     std::to_string(ranks))
                        .c_str());
    throw py::error_already_set();
  }
}

int64_t allreduce_async(at::Tensor tensor, const std::string& name, int op, double prescale,
                        double postscale, int set_id, bool in_place) {
  ReduceOp reduce = reduce_op(op, true);
  check_input(tensor, "allreduce");
  return submit(PendingOp::Kind::kTensor, set_id, held(name, {name}),
                [&](ProcessSet& set, PendingOp& pending) {
                  if (reduce == ReduceOp::kAdasum) check_adasum({tensor}, set);
                  auto o = options_for(set, reduce, prescale, postscale);
                  pending.tensors.push_back(in_place ? chorus::allreduce_async_(tensor, name, o)
                                                     : chorus::allreduce_async(tensor, name, o));
                });
}

int64_t grouped_allreduce_async(std::vector<at::Tensor> tensors, const std::string& name, int op,
                                double prescale, double postscale, int set_id, bool in_place) {
  for (const auto& t : tensors) check_input(t, "grouped_allreduce");
  auto names =
      group_names(name, process_set_for_op(set_id)->engine(), "grouped_allreduce", tensors.size());
  ReduceOp reduce = reduce_op(op, true);
  return submit(
      PendingOp::Kind::kGroup, set_id, held(name, names), [&](ProcessSet& set, PendingOp& pending) {
        if (reduce == ReduceOp::kAdasum) check_adasum(tensors, set);
        auto o = options_for(set, reduce, prescale, postscale);
        for (size_t i = 0; i < tensors.size(); ++i) {
          pending.tensors.push_back(in_place ? chorus::allreduce_async_(tensors[i], names[i], o)
                                             : chorus::allreduce_async(tensors[i], names[i], o));
        }
      });
}

int64_t allgather_async(const at::Tensor& tensor, const std::string& name, int set_id) {
  check_input(tensor, "allgather");
  return submit(
      PendingOp::Kind::kTensor, set_id, held(name, {name}),
      [&](ProcessSet& set, PendingOp& pending) {
        pending.tensors.push_back(chorus::allgather_async(tensor, name, options_for(set)));
      });
}

int64_t grouped_allgather_async(const std::vector<at::Tensor>& tensors, const std::string& name,
                                int set_id) {
  for (const auto& t : tensors) check_input(t, "grouped_allgather");
  auto names =
      group_names(name, process_set_for_op(set_id)->engine(), "grouped_allgather", tensors.size());
  return submit(PendingOp::Kind::kGroup, set_id, held(name, names),
                [&](ProcessSet& set, PendingOp& pending) {
                  for (size_t i = 0; i < tensors.size(); ++i) {
                    pending.tensors.push_back(
                        chorus::allgather_async(tensors[i], names[i], options_for(set)));
                  }
                });
}

// `root` is a rank of the whole job, as in Horovod; the engine of a set counts its own.
int64_t broadcast_async(at::Tensor tensor, int root, const std::string& name, int set_id,
                        bool in_place) {
  check_input(tensor, "broadcast");
  return submit(
      PendingOp::Kind::kTensor, set_id, held(name, {name}),
      [&](ProcessSet& set, PendingOp& pending) {
        int set_root = set.rank_of(root);
        CHORUS_CHECK_ARG(set_root >= 0, "broadcast: root rank ", root, " is not in process set ",
                         set_id);
        auto o = options_for(set);
        pending.tensors.push_back(in_place ? chorus::broadcast_async_(tensor, set_root, name, o)
                                           : chorus::broadcast_async(tensor, set_root, name, o));
      });
}

int64_t alltoall_async(const at::Tensor& tensor, std::vector<int64_t> splits,
                       const std::string& name, int set_id) {
  check_input(tensor, "alltoall");
  return submit(PendingOp::Kind::kAlltoall, set_id, held(name, {name}),
                [&](ProcessSet& set, PendingOp& pending) {
                  pending.tensors.push_back(
                      chorus::alltoall_async(tensor, std::move(splits), name, options_for(set)));
                });
}

int64_t reducescatter_async(const at::Tensor& tensor, const std::string& name, int op, int set_id,
                            double prescale, double postscale) {
  ReduceOp reduce = reduce_op(op);
  check_input(tensor, "reducescatter");
  return submit(PendingOp::Kind::kTensor, set_id, held(name, {name}),
                [&](ProcessSet& set, PendingOp& pending) {
                  auto o = options_for(set, reduce, prescale, postscale);
                  pending.tensors.push_back(chorus::reduce_scatter_async(tensor, name, o));
                });
}

int64_t grouped_reducescatter_async(const std::vector<at::Tensor>& tensors, const std::string& name,
                                    int op, int set_id, double prescale, double postscale) {
  ReduceOp reduce = reduce_op(op);
  for (const auto& t : tensors) check_input(t, "grouped_reducescatter");
  auto names = group_names(name, process_set_for_op(set_id)->engine(), "grouped_reducescatter",
                           tensors.size());
  return submit(
      PendingOp::Kind::kGroup, set_id, held(name, names), [&](ProcessSet& set, PendingOp& pending) {
        auto o = options_for(set, reduce, prescale, postscale);
        for (size_t i = 0; i < tensors.size(); ++i) {
          pending.tensors.push_back(chorus::reduce_scatter_async(tensors[i], names[i], o));
        }
      });
}

int64_t barrier_async(int set_id) {
  return submit(PendingOp::Kind::kBarrier, set_id, {}, [&](ProcessSet& set, PendingOp& pending) {
    pending.handle = set.engine().barrier(detail::auto_name(set.engine(), "barrier"));
  });
}

int64_t join_async() {
  return submit(PendingOp::Kind::kJoin, 0, {}, [&](ProcessSet& set, PendingOp& pending) {
    pending.handle = set.engine().join_async();
  });
}

}  // namespace

void wait_interruptibly(const std::function<bool(std::chrono::milliseconds)>& wait_for) {
  constexpr auto kSlice = std::chrono::milliseconds(50);
  const auto limit = default_timeout();
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    bool done;
    {
      py::gil_scoped_release no_gil;
      done = wait_for(kSlice);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (std::chrono::steady_clock::now() - start >= limit) {
      raise_timeout("chorus: the op is not finished after " + std::to_string(limit.count()) +
                    " ms (CHORUS_TIMEOUT_SECONDS); some rank has not submitted it");
    }
  }
}

namespace {

at::Tensor int32_tensor(const std::vector<int64_t>& values) {
  at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::kInt);
  auto* p = t.data_ptr<int32_t>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<int32_t>(values[i]);
  return t;
}

py::object result_of(PendingOp& op) {
  switch (op.kind) {
    case PendingOp::Kind::kTensor:
      return py::cast(op.tensors[0].wait());
    case PendingOp::Kind::kGroup: {
      py::list out;
      for (auto& t : op.tensors) out.append(py::cast(t.wait()));
      return std::move(out);
    }
    case PendingOp::Kind::kAlltoall: {
      at::Tensor out = op.tensors[0].wait();
      return py::make_tuple(out, int32_tensor(op.tensors[0].received_splits()));
    }
    case PendingOp::Kind::kBarrier:
      op.handle.wait();
      return py::none();
    case PendingOp::Kind::kJoin:
      op.handle.wait();
      return py::int_(op.handle.last_joined_rank());
  }
  return py::none();
}

py::object synchronize(int64_t id) {
  auto op = pending_ops().find(id);
  if (!op) return py::none();  // as Horovod: an unknown or finished handle
  wait_interruptibly([&](std::chrono::milliseconds t) { return op->wait_for(t); });
  pending_ops().erase(id);
  try {
    return result_of(*op);
  } catch (const Error&) {
    raise_collective_error(std::current_exception());
  }
}

bool poll(int64_t id) {
  auto op = pending_ops().find(id);
  CHORUS_CHECK_ARG(op != nullptr, "handle ", id, " was never returned or is already synchronized");
  return op->poll();
}

}  // namespace

void define_collectives(py::module_& m) {
  m.attr("Average") = static_cast<int>(kAverage);
  m.attr("Sum") = static_cast<int>(kSum);
  m.attr("Adasum") = static_cast<int>(kAdasum);
  m.attr("Min") = static_cast<int>(kMin);
  m.attr("Max") = static_cast<int>(kMax);
  m.attr("Product") = static_cast<int>(kProduct);
  m.def("allreduce_async", &allreduce_async);
  m.def("grouped_allreduce_async", &grouped_allreduce_async);
  m.def("allgather_async", &allgather_async);
  m.def("grouped_allgather_async", &grouped_allgather_async);
  m.def("broadcast_async", &broadcast_async);
  m.def("alltoall_async", &alltoall_async);
  m.def("reducescatter_async", &reducescatter_async);
  m.def("grouped_reducescatter_async", &grouped_reducescatter_async);
  m.def("barrier_async", &barrier_async);
  m.def("join_async", &join_async);
  m.def("poll", &poll);
  m.def("synchronize", &synchronize);
}

}  // namespace chorus::python
