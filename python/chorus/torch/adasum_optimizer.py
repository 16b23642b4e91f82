"""DistributedOptimizer(op=Adasum): Horovod's delta optimizer.

Averaging gradients lets one rank's large gradient drown the others'. Here every rank
instead applies the wrapped optimizer to its own gradient, and what the ranks combine
with Adasum is the step each took: the change of each parameter (its delta). Orthogonal
steps add up and parallel ones average, so the learning rate need not grow with the number
of ranks (docs/python.md). As in Horovod, the local step of a parameter runs in its
gradient's hook, and the combination overlaps the rest of backward; step() waits for it
and sets every parameter to its value at the start of the round plus the combined delta,
the same bits on every rank.
"""

import torch

from chorus.torch._hooks import TOO_MANY_BACKWARD_PASSES, hook_accumulator
from chorus.torch.ops import Adasum, allreduce_async_, synchronize


class _DeltaOptimizer(torch.optim.Optimizer):
    """The methods of the subclass DistributedOptimizer(op=Adasum) builds; never used
    directly."""

    def __init__(self, params, parameter_names, compression, backward_passes_per_step,
                 process_set):
        super(self.__class__, self).__init__(params)
        self._parameter_names = parameter_names
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in parameter_names}
        self.process_set = process_set
        self._handles = {}  # parameter -> (handle of its delta's Adasum, compression context)
        self._start = {}  # parameter -> its value when its local step began
        self._grad_accs = []
        self._requires_update = []
        if process_set.included():
            self._register_hooks()

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.append(p)
                    self._grad_accs.append(hook_accumulator(p, self._make_hook(p)))

    def _make_hook(self, p):
        def hook(*ignored):
            if p in self._handles and self._allreduce_delay[p] <= 0:
                raise AssertionError(TOO_MANY_BACKWARD_PASSES)
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                self._handles[p] = self._combine_delta_async(p)
            else:
                self._handles[p] = (None, None)
        return hook

    def _step_one(self, p):
        """The wrapped optimizer's step on ``p`` alone (its state, its group's settings)."""
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [p] if any(q is p for q in group["params"]) else []
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _combine_delta_async(self, p):
        """Takes p's local step and starts the Adasum of the change: p holds its delta until
        step() puts start + combined delta back."""
        if p.grad is None:  # not computed here (an unused branch): a step on zeros
            p.grad = torch.zeros_like(p)
        start = self._start.get(p)
        if start is None:
            start = self._start[p] = torch.empty_like(p, requires_grad=False)
        start.copy_(p.detach())
        self._step_one(p)
        p.data.sub_(start)
        compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(compressed, name=self._parameter_names[p], op=Adasum,
                                  process_set=self.process_set)
        return handle, ctx

    def synchronize(self):
        """Nothing to do: step() waits for the deltas (as Horovod's delta optimizer)."""

    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        if not self.process_set.included():  # a rank outside the set trains alone
            return super(self.__class__, self).step(closure)
        loss = closure() if closure is not None else None
        for p in self._requires_update:  # parameters whose hook did not start a combination
            handle, _ = self._handles.get(p, (None, None))
            if handle is None:
                self._handles[p] = self._combine_delta_async(p)
        for p, (handle, ctx) in self._handles.items():
            delta = self._compression.decompress(synchronize(handle), ctx)
            start = self._start[p]
            start.add_(delta)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    step.hooked = True  # no profiling range of torch's around it (optimizer.py says why)

    def _local_step(self):
        """The wrapped optimizer's step alone (broadcast_optimizer_state uses it)."""
        return super(self.__class__, self).step()

    def _elastic_reset(self):
        """chorus.torch.elastic re-formed the world (and restores the parameters): the old
        world's combinations are gone."""
        self._handles.clear()
        self._allreduce_delay = {p: self.backward_passes_per_step for p in self._parameter_names}

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes


def delta_optimizer(optimizer, parameter_names, compression, backward_passes_per_step,
                    process_set):
    """``optimizer`` as Horovod's delta optimizer over ``process_set`` (a power-of-2 number
    of ranks, as Adasum needs)."""
    ranks = process_set.size()
    if ranks & (ranks - 1):
        raise NotImplementedError("DistributedOptimizer(op=hvd.Adasum) needs a power-of-2 "
                                  "number of ranks (Adasum combines them pairwise); %s has %d"
                                  % (process_set, ranks))
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DeltaOptimizer.__dict__))
    return cls(optimizer.param_groups, parameter_names, compression, backward_passes_per_step,
               process_set)
