"""DistributedOptimizer(op=Adasum), Horovod's delta optimizer: every rank steps on its own
batch and the ranks' steps are combined with Adasum, parameter by parameter. The reference
replays every rank's model and optimizer in this process and combines their steps with
conftest's Adasum."""

import pytest
import torch
import torch.nn.functional as F

import chorus.torch as hvd
from conftest import adasum_reference
from test_optimizer import global_batch, mine, model, params_of


def power_of_2(ranks):
    return ranks & (ranks - 1) == 0


def batch_of(rank, x, y, per_rank):
    return x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]


class Replay:
    """Each of ``ranks`` ranks' own replica and optimizer (its momentum is its own)."""

    def __init__(self, ranks, optimizer=torch.optim.SGD, **settings):
        self.models = [model() for _ in range(ranks)]
        self.opts = [optimizer(m.parameters(), **settings) for m in self.models]

    def round(self, current, batches_per_rank):
        """The parameters after one round that starts at ``current``: each rank accumulates
        the gradients of its batches and steps; the steps are combined with Adasum."""
        deltas = []
        for m, opt, batches in zip(self.models, self.opts, batches_per_rank):
            with torch.no_grad():
                for p, c in zip(m.parameters(), current):
                    p.copy_(c)
            opt.zero_grad()
            for x, y in batches:
                F.mse_loss(m(x), y).backward()
            opt.step()
            deltas.append([p.detach() - c for p, c in zip(m.parameters(), current)])
        return [c + adasum_reference([d[i] for d in deltas]).view_as(c)
                for i, c in enumerate(current)]


def assert_same_on_every_rank(m, process_set=hvd.global_process_set):
    every = hvd.allgather(params_of(m).view(1, -1))
    assert all(torch.equal(every[r], every[process_set.ranks[0]])
               for r in process_set.ranks), "replicas must be bit-identical"


def delta_optimizer(m, **kwargs):
    sgd = {k: kwargs.pop(k) for k in ("lr", "momentum", "weight_decay") if k in kwargs}
    return hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), **sgd),
                                    named_parameters=m.named_parameters(), op=hvd.Adasum,
                                    **kwargs)


@pytest.mark.parametrize("optimizer,settings",
                         [(torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
                          (torch.optim.Adam, dict(lr=0.01))])
def test_the_ranks_steps_are_combined_with_adasum(optimizer, settings):
    if not power_of_2(hvd.size()):
        with pytest.raises(NotImplementedError,
                           match=r"op=hvd.Adasum\) needs a power-of-2 number of ranks.*has 3"):
            delta_optimizer(model(), lr=0.1)
        return
    dist, replay = model(), Replay(hvd.size(), optimizer, **settings)
    opt = hvd.DistributedOptimizer(optimizer(dist.parameters(), **settings),
                                   named_parameters=dist.named_parameters(), op=hvd.Adasum)
    current = [p.detach().clone() for p in dist.parameters()]
    for step in range(3):  # the state each rank keeps (momentum, Adam's moments) carries over
        x, y = global_batch(100 + step)
        opt.zero_grad()
        F.mse_loss(dist(mine(x)), mine(y)).backward()
        opt.step()
        current = replay.round(current, [[batch_of(r, x, y, len(x) // hvd.size())]
                                         for r in range(hvd.size())])
        want = torch.cat([c.view(-1) for c in current])
        assert torch.allclose(params_of(dist), want, rtol=0, atol=1e-12), step
        assert_same_on_every_rank(dist)


def test_accumulation_compression_and_misuse():
    if not power_of_2(hvd.size()):
        pytest.skip("Adasum needs a power-of-2 number of ranks")
    dist, replay = model(), Replay(hvd.size(), lr=0.1)
    opt = delta_optimizer(dist, lr=0.1, backward_passes_per_step=2)
    current = [p.detach().clone() for p in dist.parameters()]
    batches = [global_batch(200), global_batch(201)]
    opt.zero_grad()
    for x, y in batches:
        F.mse_loss(dist(mine(x)), mine(y)).backward()
    with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
        F.mse_loss(dist(mine(x)), mine(y)).backward()
    with pytest.raises(AssertionError, match="zero_grad\\(\\) was called after"):
        opt.zero_grad()
    with pytest.raises(AssertionError, match="Skipping synchronization is not supported"):
        opt.skip_synchronize()
    opt.synchronize()  # nothing to wait for: step() does
    opt.step()
    per_rank = len(batches[0][0]) // hvd.size()
    want = replay.round(current, [[batch_of(r, x, y, per_rank) for x, y in batches]
                                  for r in range(hvd.size())])
    assert torch.allclose(params_of(dist), torch.cat([w.view(-1) for w in want]), rtol=0,
                          atol=1e-12)
    # fp16 compression: the steps travel and combine as float16.
    fp16 = model()
    opt = delta_optimizer(fp16, lr=0.1, compression=hvd.Compression.fp16)
    x, y = global_batch(202)
    opt.zero_grad()
    F.mse_loss(fp16(mine(x)), mine(y)).backward()
    opt.step()
    want = Replay(hvd.size(), lr=0.1).round([p.detach() for p in model().parameters()],
                                            [[batch_of(r, x, y, per_rank)]
                                             for r in range(hvd.size())])
    assert torch.allclose(params_of(fp16), torch.cat([w.view(-1) for w in want]), rtol=0,
                          atol=1e-3)
    assert_same_on_every_rank(fp16)
    assert fp16[0].weight.dtype == torch.float64


def test_optimizer_state_broadcasts_and_sets():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    if power_of_2(hvd.size()):  # broadcast_optimizer_state steps locally, with no Adasum
        m = model(seed=hvd.rank())
        opt = delta_optimizer(m, lr=0.1, momentum=0.9)
        hvd.broadcast_parameters(m.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert_same_on_every_rank(m)
    # A power-of-2 proper subset where there is one ([0, 1] of 3 ranks); a rank outside it
    # trains alone. [0] of 2 ranks is one rank: the plain optimizer, as in Horovod.
    first = hvd.add_process_set([0, 1] if hvd.size() > 2 else [0])
    m = model()
    opt = delta_optimizer(m, lr=0.1, process_set=first)
    assert hasattr(opt, "_start") == (first.size() > 1)
    x, y = global_batch(300)
    opt.zero_grad()
    F.mse_loss(m(mine(x)), mine(y)).backward()
    opt.step()
    if first.included() and first.size() > 1:
        per_rank = len(x) // hvd.size()
        want = Replay(first.size(), lr=0.1).round(
            [p.detach() for p in model().parameters()],
            [[batch_of(r, x, y, per_rank)] for r in first.ranks])
        assert torch.allclose(params_of(m), torch.cat([w.view(-1) for w in want]), rtol=0,
                              atol=1e-12)
    every = hvd.allgather(params_of(m).view(1, -1))
    for r in range(hvd.size()):  # the set's members agree; a rank outside trained alone
        assert torch.equal(every[0], every[r]) == (r in first.ranks)
    hvd.remove_process_set(first)
