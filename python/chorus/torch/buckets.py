"""Gradient buckets in shared memory for DistributedOptimizer (the C++ optimizer's, see
docs/torch.md): when the ranks of the process set share a host, every gradient lives in a
slice of one allocation the ranks all map, ``p.grad`` a view of it (DDP's
``gradient_as_bucket_view``), and each full bucket is one in-place allreduce that the
engine runs in shared memory, unfused: no copy into a fusion buffer, none through a link,
none back. Elsewhere the memory is dropped and the optimizer reduces each gradient alone.
"""

import threading

import torch

from chorus.torch import _ops
from chorus.torch.ops import allreduce_async_, synchronize

_allocations = {}  # process set id -> how many bucket allocations this process made on it
_allocations_lock = threading.Lock()


def _allocation_name(process_set):
    """A name every rank gives its n-th optimizer on the set (ranks construct their
    optimizers in the same order, as they issue any other collective)."""
    with _allocations_lock:
        n = _allocations.get(process_set.process_set_id, 0)
        _allocations[process_set.process_set_id] = n + 1
    return "chorus.buckets.%d" % n


class GradientBuckets:
    """The buckets of one optimizer's parameters (``params``: ordered the same on every
    rank). Methods are called under the optimizer's hooks and synchronize(); the memory
    request is collective and made at construction, its answer awaited at first use."""

    def __init__(self, params, bucket_bytes, op, prescale, postscale, process_set):
        self._params = list(params)
        self._op, self._prescale, self._postscale = op, prescale, postscale
        self._process_set = process_set
        total, buckets, offset_of = _ops.plan_buckets(self._params, bucket_bytes,
                                                      process_set.process_set_id)
        self._name = _allocation_name(process_set)
        # Nothing to allocate when every gradient is reduced in place (the shared heap).
        self._memory = (_ops.alloc_shared_async(self._name, total, process_set.process_set_id)
                        if total else None)
        self._plan = (buckets, offset_of)
        self._views = None  # parameter -> its slice; {} once the memory is known not shared
        self._bucket_of = {}
        self._flat = []     # per bucket: the uint8 range as a tensor of its dtype
        self._members = []  # per bucket: its parameters
        self._ready = []    # per bucket: parameters adopted this step
        self._handles = {}  # bucket index -> allreduce handle

    def active(self):
        """Whether gradients go to buckets: waits for the memory the first time."""
        if self._views is None:
            memory = synchronize(self._memory) if self._memory is not None else None
            self._views = {}
            if memory is not None:
                self._build(memory)
        return bool(self._views)

    def __contains__(self, p):
        return self.active() and p in self._views

    def _build(self, memory):
        buckets, offset_of = self._plan
        for b, (offset, nbytes, members) in enumerate(buckets):
            dtype = self._params[members[0]].dtype
            self._flat.append(memory[offset:offset + nbytes].view(dtype))
            self._members.append([self._params[i] for i in members])
            self._ready.append(set())
            for i in members:
                p = self._params[i]
                start = offset_of[i]
                view = memory[start:start + p.numel() * p.element_size()].view(p.dtype)
                self._views[p] = view.view(p.shape)
                self._bucket_of[p] = b

    def adopt(self, p, zero=False):
        """``p``'s gradient moves into its slice (zeros when it has none, or ``zero``: a
        sparse gradient reduced on its own) and ``p.grad`` becomes the slice; a bucket
        whose every gradient is in starts its allreduce."""
        view = self._views[p]
        grad = p.grad
        if zero or grad is None:
            view.zero_()
        elif grad is not view:
            view.copy_(grad)
        if not zero:
            p.grad = view
        b = self._bucket_of[p]
        ready = self._ready[b]
        if p in ready:
            return
        ready.add(p)
        if len(ready) == len(self._members[b]):
            self._submit(b)

    def _submit(self, b):
        self._handles[b] = allreduce_async_(
            self._flat[b], name="%s.%d" % (self._name, b), op=self._op,
            prescale_factor=self._prescale, postscale_factor=self._postscale,
            process_set=self._process_set)

    def finish(self):
        """Adopts the gradients no hook brought (their values or zeros), starts the
        remaining buckets and waits for all: every p.grad then holds the reduced values."""
        for b, members in enumerate(self._members):
            for p in members:
                if p not in self._ready[b]:
                    self.adopt(p)
        error = None
        for b in sorted(self._handles):  # every one, so that none stays pending
            try:
                synchronize(self._handles[b])
            except Exception as e:  # noqa: BLE001 - the first is raised below
                error = error or e
        self._handles.clear()
        for ready in self._ready:
            ready.clear()
        if error is not None:
            raise error
