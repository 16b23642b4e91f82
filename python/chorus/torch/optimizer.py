"""DistributedOptimizer: data-parallel training around any torch.optim optimizer.

As Horovod's: the returned optimizer is an instance of a subclass of the wrapped
optimizer's class (so isinstance, state_dict and schedulers work). A hook on each
parameter's gradient accumulator starts the allreduce of that gradient as soon as
backward() has accumulated it, so the reductions of the last layers overlap the backward
pass of the first; the engine fuses small gradients. step() waits for them (submitting
zeros for parameters whose gradient this rank did not compute, so every rank runs the same
reductions) and then runs the wrapped step.

Gradients reduced as they are (no groups, no compression) by an average or a sum go to the
C++ optimizer's reducer (_ops.GradientReducer): its hooks run in C++, without the GIL, and
where the ranks share a host gradients live in buckets of shared memory, each full bucket
one allreduce there (docs/torch.md). Everything else has hooks in Python, here.
"""

import warnings
from contextlib import contextmanager

import torch

from chorus.torch import _ops
from chorus.torch._hooks import TOO_MANY_BACKWARD_PASSES, hook_accumulator
from chorus.torch.adasum_optimizer import delta_optimizer
from chorus.torch.compression import Compression
from chorus.torch.ops import (Adasum, Average, Sum, allreduce_async_, grouped_allreduce_async_,
                              size, sparse_allreduce_async, synchronize)
from chorus.torch.process_sets import global_process_set

_reducers = {}  # process set id -> how many reducers this process made on it


def _duplicates(names):
    seen, dups = set(), set()
    for name in names:
        (dups if name in seen else seen).add(name)
    return dups


def checked_names(param_groups, named_parameters):
    """{parameter: name} of an optimizer's parameters, checked as Horovod checks them: every
    parameter named, once (unnamed optimizers get Horovod's generated names)."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (i, j), p)
                            for i, group in enumerate(param_groups)
                            for j, p in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    dups = _duplicates([name for name, _ in named_parameters])
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. "
                         "Found duplicates: %s" % ", ".join(sorted(dups)))
    named = {id(p) for _, p in named_parameters}
    unnamed = [id(p) for group in param_groups for p in group["params"] if id(p) not in named]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: %s"
                         % ", ".join(str(i) for i in unnamed))
    return {p: name for name, p in sorted(named_parameters, key=lambda kv: kv[0])}


def _split(items, parts):
    """``items`` in ``parts`` nearly equal consecutive pieces."""
    n, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + n + (1 if i < extra else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods of the subclass DistributedOptimizer() builds; never used directly."""

    def __init__(self, params, parameter_names, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set, bucket_bytes):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._parameter_names = parameter_names
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in self._parameter_names}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}  # parameter (or a group's tuple) -> (handle, compression context)
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._groups = self._check_groups(groups)
        self._p_to_group = {}
        self._group_counts = {}
        self._reducer = None
        self._reduced = []  # the reducer's parameters, in its order
        # In an elastic job the world may grow from one rank, and newcomers build their
        # optimizer while the others keep theirs: Python hooks, reductions one by one (a
        # reducer is collective at construction, its buckets one world's memory).
        elastic = _ops.elastic_enabled()
        if self.process_set.included() and (size() > 1 or elastic):
            if elastic or not self._start_reducer(bucket_bytes):
                self._register_hooks()

    @staticmethod
    def _check_groups(groups):
        if groups is None:
            return None
        if isinstance(groups, list):
            seen = set()
            for group in groups:
                for p in group:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor.")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups.")
                    seen.add(id(p))
            return groups
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError("groups should be a positive integer or a list of lists of "
                             "torch.Tensor.")
        return groups

    def _start_reducer(self, bucket_bytes):
        """The C++ reducer, when gradients are reduced as they are (no groups, no
        compression) by an average or a sum; whether it was started."""
        if (self._groups is not None or self._compression is not Compression.none
                or self.op not in (Average, Sum)):
            return False
        seen = set()
        for group in self.param_groups:  # model order, the same on every rank
            for p in group["params"]:
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    self._reduced.append(p)
        set_id = self.process_set.process_set_id
        n = _reducers.get(set_id, 0)  # every rank builds its optimizers in the same order
        _reducers[set_id] = n + 1
        self._reducer = _ops.GradientReducer(
            [(self._parameter_names[p], p) for p in self._reduced], self.op,
            self.gradient_predivide_factor, self.backward_passes_per_step, bucket_bytes, set_id,
            "chorus.optimizer.%d/" % n)
        return True

    def _reducer_alive(self):
        """Whether the reducer goes on; after a shutdown (it is then detached), hooks in
        Python take over: synchronize() starts whatever they did not."""
        if self._reducer is not None and self._reducer.detached():
            self._reducer = None
            self._register_hooks()
        return self._reducer is not None

    # --- hooks -----------------------------------------------------------------------------

    def _form_groups(self, params):
        """Groups of parameters whose gradients are reduced together (every rank orders the
        parameters by name, so the groups agree)."""
        params = sorted(params, key=lambda p: self._parameter_names[p])
        if isinstance(self._groups, list):
            ids = {id(p) for p in params}
            groups = [[p for p in group if id(p) in ids] for group in self._groups]
            grouped = {id(p) for group in groups for p in group}
            groups += [[p] for p in params if id(p) not in grouped]
        else:
            groups = _split(params, self._groups)
        for group in groups:
            if group:
                group = tuple(group)
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

    def _register_hooks(self):
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if self._groups is not None:
            self._form_groups(params)
        for p in params:
            self._requires_update.add(p)
            self._grad_accs.append(hook_accumulator(p, self._make_hook(p)))

    def _make_hook(self, p):
        def hook(*ignored):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(TOO_MANY_BACKWARD_PASSES)
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            self._allreduce_delay[p] -= 1
            handle, ctx = None, None
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_async(group)
                        for q in group:
                            self._handles.pop(q, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _scale_factors(self):
        if self.op == Average:  # split the average around the sum (float16 range)
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Not computed here (an unused branch), but maybe on another rank: send zeros.
            p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(tensor, name=name, op=self.op,
                                              process_set=self.process_set), None
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        pre, post = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_async(self, group):
        compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in group])
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async_(list(compressed), name=self._parameter_names[group[0]],
                                          op=self.op, prescale_factor=pre, postscale_factor=post,
                                          process_set=self.process_set)
        return handle, ctxs

    # --- synchronize and step --------------------------------------------------------------

    def _set_grad(self, p, output, ctx):
        self._allreduce_delay[p] = self.backward_passes_per_step
        reduced = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:
            if not reduced.is_sparse:
                reduced = reduced.to_sparse()
            p.grad.zero_().add_(reduced)
        elif reduced is not p.grad:
            p.grad.set_(reduced)

    def synchronize(self):
        """Waits for every gradient's reduction (starting those the hooks did not) and leaves
        the reduced gradients in ``p.grad``."""
        if not self.process_set.included():
            self._synchronized = True
            return
        if self._reducer_alive():
            self._reducer.submit_remaining()
            for i in self._reducer.sparse_params():  # left to us: reduced as Horovod does
                p = self._reduced[i]
                self._handles[p] = self._allreduce_grad_async(p)
            self._reducer.synchronize()
        else:
            self._start_remaining()
        for key, (handle, ctx) in self._handles.items():
            if isinstance(key, tuple):
                for p, output, c in zip(key, synchronize(handle), ctx):
                    self._set_grad(p, output, c)
            else:
                output = handle() if callable(handle) else synchronize(handle)
                self._set_grad(key, output, ctx)
        for group in self._group_counts:
            self._group_counts[group] = 0
        self._handles.clear()
        self._synchronized = True

    def _start_remaining(self):
        """Starts the reductions the Python hooks did not."""
        started = set()
        for key in self._handles:
            started.update(key if isinstance(key, tuple) else (key,))
        for p in self._requires_update - started:
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)

    def _elastic_reset(self):
        """chorus.torch.elastic re-formed the world: the old world's reductions are gone."""
        self._handles.clear()
        self._allreduce_delay = {p: self.backward_passes_per_step for p in self._parameter_names}
        for group in self._group_counts:
            self._group_counts[group] = 0
        self._synchronized = False

    @contextmanager
    def skip_synchronize(self):
        """Inside it, step() does not synchronize: for ``synchronize(); clip; step()``."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if not torch.autograd._profiler_enabled():
            return self._synchronize_and_step(closure)
        with torch.autograd.profiler.record_function(f"Optimizer.step#{type(self).__name__}.step"):
            return self._synchronize_and_step(closure)

    # torch wraps an optimizer's step() in a profiling range, record_function: Python code in
    # torch 1.13 that took ~70 us a step here, between backward and the wait, while the
    # engine thread needs the core (2 % of the Fashion-MNIST CNN's throughput on 2 cores).
    # Marked as wrapped, this step() is not: it opens torch's range itself, and only while
    # a profiler runs (a C call otherwise). The wrapped optimizer's step keeps its own range.
    step.hooked = True

    def _synchronize_and_step(self, closure):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        result = super(self.__class__, self).step(closure)
        if self._reducer_alive():
            self._reducer.next_round()
        return result

    def _local_step(self):
        """The wrapped optimizer's step alone (broadcast_optimizer_state uses it)."""
        return super(self.__class__, self).step()

    def zero_grad(self, *args, **kwargs):
        if self._handles or (self._reducer_alive() and self._reducer.in_flight()):
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        if self._reducer_alive():
            if self._reducer.in_flight():  # no reduction may outlive its round
                self._reducer.synchronize()
            self._reducer.next_round()
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        if self._reducer_alive():
            self._reducer.set_backward_passes_per_step(passes)
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, bucket_bytes=4 << 20):
    """Wraps ``optimizer`` so that step() applies gradients averaged (``op``) over the ranks
    of ``process_set``. Horovod's arguments: ``named_parameters`` (stable names; every
    parameter must be named), ``compression``, ``backward_passes_per_step`` (local
    accumulation), ``gradient_predivide_factor`` (Average only), ``groups`` (gradients
    reduced together), ``sparse_as_dense``. chorus's: ``bucket_bytes``, the most bytes of
    gradients per bucket of shared memory (0: no buckets; docs/torch.md).

    With ``op=Adasum`` (over more than one rank) it is Horovod's delta optimizer instead:
    each rank steps on its own gradient and the ranks combine the steps with Adasum
    (chorus/torch/adasum_optimizer.py; ``groups``, ``sparse_as_dense`` and ``bucket_bytes``
    do not apply)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups`", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    names = checked_names(optimizer.param_groups, named_parameters)
    if op == Adasum and process_set.size() > 1:
        return delta_optimizer(optimizer, names, compression, backward_passes_per_step,
                               process_set)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, names, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set, bucket_bytes)
