"""Making ranks start alike: parameters, optimizer state and Python objects from one rank.

``broadcast_object`` and ``allgather_object`` pickle: the receiving ranks unpickle what
the root sent. That is Horovod's contract too; the bytes only travel between the ranks of
one job, over connections authenticated with the job's secret.
"""

import collections

import torch

from chorus.torch.ops import allgather, broadcast_, broadcast_async_, rank, synchronize
from chorus.torch.process_sets import global_process_set

try:  # Horovod pickles with cloudpickle (lambdas, local classes); plain pickle otherwise
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the machine
    import pickle as _pickle


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Copies ``root_rank``'s parameters into every rank's, in place: ``params`` is a dict
    (``model.state_dict()``: named by its keys, in sorted order) or a list of parameters or
    of (name, parameter) pairs (``model.named_parameters()``)."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = [broadcast_async_(p, root_rank, name, process_set) for name, p in params]
    for handle in handles:
        synchronize(handle)


def _local_step(optimizer):
    """The wrapped optimizer's own step, without DistributedOptimizer's reductions (which
    every rank would have to join)."""
    step = getattr(optimizer, "_local_step", None)
    return step() if step is not None else optimizer.step()


def _initialize_state(optimizer, model):
    """A fresh optimizer has no state to overwrite: take one step on zero gradients so it
    does (what Horovod does)."""
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                    p.grad = p.grad.to_sparse()
    _local_step(optimizer)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Copies ``root_rank``'s optimizer state and options (learning rate ...) into every
    rank's optimizer. Tensors are broadcast in place; other values are pickled, so their
    types survive (a tuple stays a tuple). ``model`` names sparse embeddings."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        _initialize_state(optimizer, model)
        state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        return  # a stateless optimizer

    tensors = []
    scalars = {}
    assign = {}
    seen = collections.defaultdict(int)

    def set_option(index, key):
        def apply(value):
            optimizer.param_groups[index][key] = value
        return apply

    def set_state(pid, key):
        def apply(value):
            state_dict["state"][pid][key] = value
        return apply

    for index, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key == "params":
                continue
            name = "%s.%d" % (key, index)
            scalars[name] = value
            assign[name] = set_option(index, key)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue  # no gradient yet: no state
            for key, value in state_dict["state"][pid].items():
                seen[key] += 1
                name = "%s.%d" % (key, seen[key])
                if torch.is_tensor(value):
                    tensors.append((name, value))
                else:
                    scalars[name] = value
                    assign[name] = set_state(pid, key)

    broadcast_parameters(tensors, root_rank, process_set)
    for name, value in broadcast_object(scalars, root_rank, process_set=process_set).items():
        assign[name](value)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """``root_rank``'s ``obj`` (anything picklable) on every rank of the set."""
    name = type(obj).__name__ if name is None else name
    if rank() == root_rank:
        data = torch.ByteTensor(bytearray(_pickle.dumps(obj)))
        length = torch.LongTensor([data.numel()])
        broadcast_(length, root_rank, name + ".sz", process_set)
    else:
        length = torch.LongTensor([0])
        broadcast_(length, root_rank, name + ".sz", process_set)
        data = torch.ByteTensor(int(length.item()))
    broadcast_(data, root_rank, name + ".t", process_set)
    if rank() == root_rank:
        return obj
    return _pickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's ``obj`` (anything picklable), as a list in rank order."""
    name = type(obj).__name__ if name is None else name
    data = torch.ByteTensor(bytearray(_pickle.dumps(obj)))
    lengths = allgather(torch.LongTensor([data.numel()]), name=name + ".sz",
                        process_set=process_set).tolist()
    gathered = allgather(data, name=name + ".t", process_set=process_set).numpy()
    out, start = [], 0
    for n in lengths:
        out.append(_pickle.loads(gathered[start:start + n].tobytes()))
        start += n
    return out
