"""Horovod's elastic API (``hvd.elastic``) over chorus's elastic jobs (docs/elastic.md).

    import chorus.torch as hvd

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, start=state.batch): ...
                state.commit()
            state.batch = 0

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    train(state)

started with ``chorusrun --min-np 2 --max-np 4 ... python3 train.py``. When a worker dies,
the survivors' collectives raise HorovodInternalError; ``run`` restores the last commit,
re-forms the world in chorusrun's next round (no process restarts), calls the reset
callbacks, syncs the state and calls the function again. When chorusrun adds workers,
``commit()`` raises HostsUpdatedInterrupt on every rank alike and the same happens without
the rollback. Outside an elastic job ``run`` is a sync and a call.

What differs from Horovod: the state is synced from the rank that committed most (the lowest
such rank), not always from rank 0, so a survivor whose last step missed its commit catches
up; a HorovodInternalError while the world is intact (a MismatchError, say) is the
program's bug and is raised, not retried.
"""

import copy
import functools
import math
import random

import torch

from chorus.torch import _ops
from chorus.torch.functions import allgather_object, broadcast_object, broadcast_optimizer_state
from chorus.torch.ops import HorovodInternalError, Max, Min, allreduce, rank, size


class HostsUpdatedInterrupt(RuntimeError):
    """chorusrun changed who is in the job; raised by ``State.commit()`` on every rank."""

    def __init__(self, skip_sync=False):
        super().__init__("the launcher changed the job's workers")
        self.skip_sync = skip_sync


class State:
    """What survives a reset (Horovod's horovod.common.elastic.State): subclasses save,
    restore and sync their parts; this class counts commits and runs the callbacks."""

    def __init__(self):
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Each is called with no arguments after every reset, before the sync."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp=None, update_res=None):
        """Horovod's notification hook; chorus asks chorusrun at commit() instead."""

    def commit(self):
        """Saves the state in memory, then check_host_updates(). Collective."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when chorusrun published a new
        membership (all ranks agree through one tiny allreduce). Collective."""
        if _ops.elastic_hosts_updated():
            raise HostsUpdatedInterrupt()

    def sync(self):
        """Every rank takes the state of the rank with the most commits. Collective."""
        most = int(allreduce(torch.tensor([self._commits]), op=Max,
                             name="elastic.most_commits").item())
        mine = rank() if self._commits == most else size()
        root = int(allreduce(torch.tensor([mine]), op=Min, name="elastic.sync_root").item())
        self._commits = broadcast_object(self._commits, root, name="elastic.commits")
        self._sync_from(root)
        self.save()

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def _sync_from(self, root):
        raise NotImplementedError


class ObjectState(State):
    """Named plain values (``state.epoch``), saved by deep copy, synced by broadcast."""

    def __init__(self, **kwargs):
        self._values = dict(kwargs)
        super().__init__()
        self._saved = copy.deepcopy(self._values)

    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        if name.startswith("_") or "_values" not in self.__dict__ or name not in self._values:
            super().__setattr__(name, value)
        else:
            self._values[name] = value

    def save(self):
        self._saved = copy.deepcopy(self._values)

    def restore(self):
        self._values = copy.deepcopy(self._saved)

    def _sync_from(self, root):
        self._values = broadcast_object(self._values, root, name="elastic.values")


class TorchState(ObjectState):
    """Horovod's TorchState: a model, an optimizer, an ElasticSampler (any keyword whose
    value is one) and plain values, all saved in memory at commit()."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.__dict__["model"] = model
        self.__dict__["optimizer"] = optimizer
        self.__dict__["_samplers"] = {k: v for k, v in kwargs.items()
                                      if isinstance(v, ElasticSampler)}
        plain = {k: v for k, v in kwargs.items() if k not in self._samplers}
        for name, sampler in self._samplers.items():
            self.__dict__[name] = sampler
        self.__dict__["_saved_model"] = None
        self.__dict__["_saved_optimizer"] = None
        self.__dict__["_saved_samplers"] = {}
        super().__init__(**plain)
        self.save()

    def save(self):
        super().save()
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())
        self._saved_samplers = {k: s.state_dict() for k, s in self._samplers.items()}

    def restore(self):
        super().restore()
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        for name, sampler in self._samplers.items():
            sampler.load_state_dict(self._saved_samplers[name])

    def _sync_from(self, root):
        super()._sync_from(root)
        if self.model is not None:
            from chorus.torch.functions import broadcast_parameters
            broadcast_parameters(self.model.state_dict(), root_rank=root)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=root)
        for name, sampler in sorted(self._samplers.items()):
            sampler.sync(root, name)


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: shards the samples not yet processed this epoch among the
    current ranks, again after every reset. Record what was trained with
    ``record_batch(batch_idx, batch_size)`` (or ``record_indices``) before ``commit()``;
    the sync joins every rank's record. As in Horovod the shards are padded to equal length
    by repeating samples, so a few may be seen twice in an epoch (chorus's C++
    ElasticSampler is exact)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices)}

    def sync(self, root, name="sampler"):
        """Every rank's processed samples, joined; the epoch of `root`. Collective."""
        everyone = allgather_object(sorted(self.processed_indices), name=f"elastic.{name}.done")
        epoch = broadcast_object(self.epoch, root, name=f"elastic.{name}.epoch")
        self.epoch = epoch
        self.processed_indices = set().union(*map(set, everyone))
        self.reset()

    def reset(self):
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        remaining = [i for i in order if i not in self.processed_indices]
        n = size() if _ops.is_initialized() else 1
        r = rank() if _ops.is_initialized() else 0
        self.num_samples = int(math.ceil(len(remaining) / n)) if remaining else 0
        total = self.num_samples * n
        padded = remaining + remaining[:total - len(remaining)]
        self.indices = padded[r:total:n]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


def run(func):
    """Horovod's ``hvd.elastic.run`` decorator: ``func(state, *args, **kwargs)`` is called
    until it returns, riding out workers that leave or join (see the module's text)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()  # a failure here is one more reset
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                if not (_ops.elastic_enabled() and _ops.elastic_world_failed()):
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            _ops.elastic_reform()
            optimizer = getattr(state, "optimizer", None)
            if hasattr(optimizer, "_elastic_reset"):
                optimizer._elastic_reset()
            for sampler in getattr(state, "_samplers", {}).values():
                sampler.reset()
            state.on_reset()

    return wrapper
