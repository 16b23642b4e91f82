"""Horovod's collectives on torch tensors, over chorus's engine.

Every function has Horovod's name, arguments and meaning (``hvd.allreduce(tensor,
name=..., op=hvd.Average, prescale_factor=..., postscale_factor=..., process_set=...)``);
what chorus adds is said where it differs. Tensors are handed to the C++ engine without
copies: an asynchronous op reads (and, in place, writes) the tensor's memory until it is
synchronized, so do not change the tensor meanwhile.

Ops are paired across ranks by name; unnamed ops get "<op>.noname.<n>", counted per
process set, so ranks must issue their unnamed ops on a set in the same order.

Errors: ValueError for bad arguments or before init (raised on the calling rank at once);
HorovodInternalError (a RuntimeError) when a collective fails, on every rank that
submitted it: MismatchError (ranks disagree), PeerError (a rank is gone),
CollectiveTimeout (nothing for CHORUS_TIMEOUT_SECONDS).
"""

import atexit
import sys
import warnings

import torch

from chorus.torch import _ops
from chorus.torch.compression import Compression
from chorus.torch.process_sets import ProcessSet, global_process_set, _register_after_init

HorovodInternalError = _ops.HorovodInternalError
MismatchError = _ops.MismatchError
PeerError = _ops.PeerError
CollectiveTimeout = _ops.CollectiveTimeout

Average = _ops.Average
Sum = _ops.Sum
Adasum = _ops.Adasum
Min = _ops.Min
Max = _ops.Max
Product = _ops.Product

# --- the job -------------------------------------------------------------------------------


def init(comm=None, process_sets=None):
    """Joins the job its launcher describes (chorusrun, torchrun, mpirun, Slurm ...);
    a no-op when already initialized. ``process_sets``: ProcessSet objects to register
    at once (``add_process_set`` also works later). After ``shutdown()``, ``init()`` joins
    again. ``comm`` (an MPI communicator or a list of ranks) is not supported: start the
    ranks you want with the launcher."""
    if comm is not None:
        raise NotImplementedError(
            "chorus.torch.init(comm=...) is not supported: chorus does not run on an MPI "
            "communicator; start the ranks you want with chorusrun")
    process_sets = list(process_sets or [])
    for ps in process_sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError("process_sets must be ProcessSet objects, got %r" % (ps,))
    _ops.init([ps.ranks for ps in process_sets])
    _register_after_init(process_sets)
    _shutdown_at_exit.register()


class _shutdown_at_exit:
    """As in Horovod, a program need not call shutdown(): at exit every rank does, so that
    the ranks stop together (and MPI, under the MPI data path, is finalized with nothing in
    flight). Not after an unhandled exception: that rank ends at once, and its launcher
    stops the others, instead of waiting in shutdown's barrier for ranks that will not come."""
    registered = False

    @classmethod
    def register(cls):
        if not cls.registered:
            atexit.register(cls.run)
            cls.registered = True

    @staticmethod
    def run():
        if getattr(sys, "last_value", None) is not None or not _ops.is_initialized():
            return
        try:
            _ops.shutdown()
        except Exception:  # the job is ending; its errors were reported where they arose
            pass


def shutdown():
    """Waits for every rank (a barrier), then stops the engine and closes the connections.
    Handles still pending are forgotten."""
    _ops.shutdown()


is_initialized = _ops.is_initialized
rank = _ops.rank
size = _ops.size
local_rank = _ops.local_rank
local_size = _ops.local_size
cross_rank = _ops.cross_rank
cross_size = _ops.cross_size
is_homogeneous = _ops.is_homogeneous


def start_timeline(file_path, mark_cycles=False):
    """Starts writing this rank's Chrome-trace timeline (chrome://tracing) to file_path.
    ``mark_cycles`` is accepted for Horovod's sake; chorus marks no cycles."""
    _ops.start_timeline(str(file_path))


def stop_timeline():
    _ops.stop_timeline()


# What chorus was built with. Its collectives run over its own TCP and shared-memory
# transports, or through MPI (CHORUS_TRANSPORT=mpi, chorusrun --mpi) where it was built with
# libopenmpi-dev: no Gloo, NCCL, oneCCL, DDL, CUDA or ROCm.
def mpi_built():
    """Whether this chorus can run its collectives through MPI."""
    return _ops.mpi_built()


def mpi_enabled():
    """Whether this job's collectives run through MPI (False before init())."""
    return _ops.mpi_enabled()


def mpi_threads_supported():
    """Whether MPI lets the program's own threads call it beside chorus (MPI_THREAD_MULTIPLE,
    when the program initialised MPI at that level). ValueError unless mpi_enabled()."""
    if not mpi_enabled():
        raise ValueError("chorus does not run this job's collectives through MPI, so MPI "
                         "threading does not apply (mpi_enabled() is False; chorusrun --mpi "
                         "runs them through MPI)")
    return _ops.mpi_threads_supported()


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


# --- helpers -------------------------------------------------------------------------------


def _name(name):
    return "" if name is None else str(name)


def _op(op, average):
    """Horovod's resolution of ``op`` and the deprecated ``average``."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    return Average


def _set_id(process_set):
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a ProcessSet, got %r" % (process_set,))
    if process_set.process_set_id is None:
        raise ValueError("%s is not registered (add_process_set) or was removed" % process_set)
    return process_set.process_set_id


def poll(handle):
    """Whether the op behind ``handle`` finished; never blocks (when it has not, yields the
    core once, so that a loop of polls lets chorus's engine thread run)."""
    return _ops.poll(handle)


def synchronize(handle):
    """Waits for the op behind ``handle`` and returns its result (None for an unknown or
    already synchronized handle). Ctrl-C interrupts the wait."""
    return _ops.synchronize(handle)


# --- allreduce ------------------------------------------------------------------------------


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts a reduction of ``tensor`` over the ranks into a new tensor; returns a handle."""
    return _ops.allreduce_async(tensor, _name(name), _op(op, average), float(prescale_factor),
                                float(postscale_factor), _set_id(process_set), False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """As allreduce_async, writing the result into ``tensor``."""
    return _ops.allreduce_async(tensor, _name(name), _op(op, average), float(prescale_factor),
                                float(postscale_factor), _set_id(process_set), True)


class _Allreduce(torch.autograd.Function):
    """The gradient of an allreduce is the same allreduce of the gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, ps = ctx.args
        grad = allreduce(grad_output.contiguous(), op=op, prescale_factor=pre,
                         postscale_factor=post, process_set=ps)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction of ``tensor`` over the ranks (Average by default), as a new tensor;
    differentiable. ``compression`` (Compression.fp16) is applied on the wire."""
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, _op(op, average), prescale_factor,
                               postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """The reduction of ``tensor`` over the ranks, written into ``tensor``, which is returned."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts the reductions of a list of tensors (fused by the engine); one handle."""
    return _ops.grouped_allreduce_async(list(tensors), _name(name), _op(op, average),
                                        float(prescale_factor), float(postscale_factor),
                                        _set_id(process_set), False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _ops.grouped_allreduce_async(list(tensors), _name(name), _op(op, average),
                                        float(prescale_factor), float(postscale_factor),
                                        _set_id(process_set), True)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(
            tensors, None, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, pre, post, ps = ctx.args
        grads = grouped_allreduce([g.contiguous() for g in grad_outputs], op=op,
                                  prescale_factor=pre, postscale_factor=post, process_set=ps)
        return (None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reductions of a list of tensors, as a list of new tensors; differentiable."""
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = _GroupedAllreduce.apply(name, _op(op, average), prescale_factor, postscale_factor,
                                      process_set, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's reduction of a sparse tensor: allgathers of its indices and values.
    Returns a function that waits and gives the reduced sparse tensor."""
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async takes a sparse tensor")
    t = tensor
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(), name="%s.indices" % name,
                              process_set=process_set)
    values = allgather_async(t._values().contiguous(), name="%s.values" % name,
                             process_set=process_set)

    def wait():
        gathered_values = synchronize(values)
        gathered_indices = synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / process_set.size()
        return torch.sparse_coo_tensor(gathered_indices.transpose(0, 1), gathered_values,
                                       t.size())

    return wait


# --- allgather ------------------------------------------------------------------------------


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts the concatenation of every rank's ``tensor`` along the first dimension (which
    may differ between ranks); returns a handle."""
    return _ops.allgather_async(tensor, _name(name), _set_id(process_set))


def _rows_before(first_dim, process_set):
    """(rows before this rank's part, rows of each rank) of an allgather's result."""
    dims = synchronize(allgather_async(torch.tensor([first_dim], dtype=torch.int64),
                                       process_set=process_set))
    r = process_set.rank()
    return int(dims[:r].sum())


class _Allgather(torch.autograd.Function):
    """Horovod's gradient: the average of the gradients over the ranks, this rank's rows."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        offset = _rows_before(ctx.rows, ctx.process_set)
        return grad.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's ``tensor`` concatenated along the first dimension, in rank order;
    differentiable."""
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _ops.grouped_allgather_async(list(tensors), _name(name), _set_id(process_set))


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce([g.contiguous() for g in grad_outputs], op=Average,
                                  process_set=ctx.process_set)
        parts = []
        for grad, rows in zip(grads, ctx.rows):
            parts.append(grad.narrow(0, _rows_before(rows, ctx.process_set), rows))
        return (None, None, *parts)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor of a list; differentiable."""
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


# --- broadcast ------------------------------------------------------------------------------


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying ``root_rank``'s tensor (a rank of the whole job) into a new tensor on
    every rank of the set; returns a handle."""
    return _ops.broadcast_async(tensor, int(root_rank), _name(name), _set_id(process_set), False)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """As broadcast_async, into ``tensor`` itself."""
    return _ops.broadcast_async(tensor, int(root_rank), _name(name), _set_id(process_set), True)


class _Broadcast(torch.autograd.Function):
    """Horovod's gradient: the average of the gradients over the ranks, on the root only."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """``root_rank``'s tensor, as a new tensor on every rank; differentiable."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """``root_rank``'s tensor copied into ``tensor`` on every rank; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall -------------------------------------------------------------------------------


def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError("alltoall: splits must be a tensor of int32, not %s" % splits.dtype)
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending rows ``[sum(splits[:j]), +splits[j])`` of ``tensor`` to rank j of the
    set (even parts of the first dimension without ``splits``); returns a handle whose
    result is (tensor, received splits)."""
    return _ops.alltoall_async(tensor, _splits_list(splits), _name(name), _set_id(process_set))


class _Alltoall(torch.autograd.Function):
    """The gradient goes back where the rows came from: an alltoall with the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *ignored):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received,
                           process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The rows every rank sent here, concatenated in rank order; with ``splits`` given,
    also how many came from each rank (an int32 tensor). Differentiable."""
    return _Alltoall.apply(tensor, splits, name, process_set)


# --- reducescatter --------------------------------------------------------------------------


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts the reduction of ``tensor`` over the ranks, of which this rank keeps its part
    of the first dimension (the first ``dim0 % size`` ranks get a row more); a handle."""
    return _ops.reducescatter_async(tensor, _name(name), op, _set_id(process_set),
                                    float(prescale_factor), float(postscale_factor))


def _reducescatter_grad(grads, op, prescale, postscale, process_set):
    """Horovod's gradient of a reducescatter, before the allgather: scaled by the set's size
    for Sum, and by the scale factors."""
    factor = (process_set.size() if op == Sum else 1.0) * prescale * postscale
    return [g * factor if factor != 1.0 else g for g in grads]


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, ps = ctx.args
        (grad,) = _reducescatter_grad([grad_output], op, pre, post, ps)
        return allgather(grad.contiguous(), process_set=ps), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's part of the reduction of ``tensor`` over the ranks; differentiable."""
    compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                   postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    return _ops.grouped_reducescatter_async(list(tensors), _name(name), op, _set_id(process_set),
                                            float(prescale_factor), float(postscale_factor))


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_reducescatter_async(
            tensors, name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, pre, post, ps = ctx.args
        grads = _reducescatter_grad(grad_outputs, op, pre, post, ps)
        return (None, None, None, None, None,
                *grouped_allgather([g.contiguous() for g in grads], process_set=ps))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor of a list; differentiable."""
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = _GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                          postscale_factor, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


# --- synchronization ------------------------------------------------------------------------


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    synchronize(_ops.barrier_async(_set_id(process_set)))


def join(device=-1):
    """This rank has no more data: until every rank has joined, it contributes zeros to the
    others' allreduces (allgather, broadcast, alltoall and reducescatter fail meanwhile, as
    in Horovod). Returns the last rank to join, on every rank. ``device`` is ignored (CPU)."""
    return synchronize(_ops.join_async())
