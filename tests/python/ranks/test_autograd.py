"""The gradient of every collective, as Horovod defines it, with gradients that differ per
rank so that where each part goes is checked too."""

import torch

import chorus.torch as hvd


def mean_of_ranks(f):
    return sum(f(r) for r in range(hvd.size())) / hvd.size()


def test_allreduce_gradient_is_the_same_reduction():
    for op in (hvd.Sum, hvd.Average):
        x = torch.ones(3, 2, dtype=torch.float64, requires_grad=True)
        y = hvd.allreduce(x, op=op, prescale_factor=2.0)
        y.backward(torch.full((3, 2), float(hvd.rank() + 1), dtype=torch.float64))
        # d/dx of op(2 x_r): the same op over the ranks' upstream gradients, times 2.
        upstream = sum(r + 1 for r in range(hvd.size())) / (1 if op == hvd.Sum else hvd.size())
        assert torch.allclose(x.grad, torch.full((3, 2), 2.0 * upstream, dtype=torch.float64))


def test_grouped_allreduce_gradient():
    xs = [torch.ones(i + 1, requires_grad=True) for i in range(3)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    torch.stack([y.sum() for y in ys]).sum().backward()
    assert all(torch.equal(x.grad, torch.full_like(x, hvd.size())) for x in xs)


def test_allgather_gradient_is_the_mean_of_this_ranks_rows():
    rows = hvd.rank() + 1
    x = torch.zeros(rows, 2, requires_grad=True)
    y = hvd.allgather(x)
    total = sum(r + 1 for r in range(hvd.size()))
    assert y.shape == (total, 2)
    # Rank r's upstream gradient for row i of the result is 10 * r + i.
    upstream = torch.arange(total, dtype=torch.float32).view(-1, 1).repeat(1, 2) + 10 * hvd.rank()
    y.backward(upstream)
    start = sum(r + 1 for r in range(hvd.rank()))
    want = torch.arange(start, start + rows, dtype=torch.float32).view(-1, 1).repeat(1, 2)
    want += mean_of_ranks(lambda r: 10 * r)
    assert torch.allclose(x.grad, want)


def test_broadcast_gradient_reaches_the_root_only():
    for root in range(hvd.size()):
        x = torch.ones(4, requires_grad=True)
        hvd.broadcast(x, root).backward(torch.full((4,), float(hvd.rank())))
        want = mean_of_ranks(float) if hvd.rank() == root else 0.0
        assert torch.allclose(x.grad, torch.full((4,), want))


def test_alltoall_gradient_goes_back_where_the_rows_came_from():
    size, rank = hvd.size(), hvd.rank()
    splits = torch.tensor([r + 1 for r in range(size)], dtype=torch.int32)
    x = torch.zeros(int(splits.sum()), 1, requires_grad=True)
    y, received = hvd.alltoall(x, splits)
    # The gradient of each received row: 100 * (its sender) + this rank.
    senders = torch.cat([torch.full((int(n),), float(s)) for s, n in enumerate(received.tolist())])
    y.backward((100 * senders + rank).view(-1, 1))
    # Row block j of x went to rank j, which sent back 100 * rank + j.
    want = torch.cat([torch.full((r + 1,), float(100 * rank + r)) for r in range(size)])
    assert torch.equal(x.grad.view(-1), want)


def test_reducescatter_gradient_is_an_allgather():
    size = hvd.size()
    for op, factor in ((hvd.Sum, size), (hvd.Average, 1)):
        x = torch.zeros(2 * size, 3, requires_grad=True)
        y = hvd.reducescatter(x, op=op)
        y.backward(torch.full_like(y, float(hvd.rank() + 1)))
        want = torch.cat([torch.full((2, 3), float(r + 1)) for r in range(size)]) * factor
        assert torch.equal(x.grad, want)
