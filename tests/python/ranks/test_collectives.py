"""Every collective against a reference computed locally from what each rank contributes:
dtypes x shapes, in and out of place, async, grouped, scale factors, process sets."""

import itertools

import pytest
import torch

import chorus.torch as hvd
from conftest import adasum_reference, data

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
SIGNED = [t for t in DTYPES if t != torch.uint8]
SHAPES = [(17,), (5, 3), (2, 3, 4), ()]


def everyone(shape, dtype, seed=0, ranks=None):
    ranks = range(hvd.size()) if ranks is None else ranks
    return [data(r, shape, dtype, seed) for r in ranks]


@pytest.mark.parametrize("dtype,shape", itertools.product(SIGNED, SHAPES))
def test_allreduce_sums_every_dtype(dtype, shape):
    mine = data(hvd.rank(), shape, dtype)
    want = sum(t.double() for t in everyone(shape, dtype)).to(dtype)
    got = hvd.allreduce(mine, op=hvd.Sum)
    assert got.dtype == dtype and got.shape == mine.shape
    assert torch.equal(got, want)
    assert torch.equal(mine, data(hvd.rank(), shape, dtype)), "the input must not change"


@pytest.mark.parametrize("op", ["Min", "Max", "Product", "Average"])
def test_allreduce_ops(op):
    shape, dtype = (4, 5), torch.float64
    parts = torch.stack(everyone(shape, dtype, seed=1))
    want = {"Min": parts.min(0).values, "Max": parts.max(0).values, "Product": parts.prod(0),
            "Average": parts.mean(0)}[op]
    got = hvd.allreduce(data(hvd.rank(), shape, dtype, seed=1), op=getattr(hvd, op))
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def test_integer_average_truncates():
    mine = torch.full((3,), 2 * hvd.rank() + 1, dtype=torch.int32)
    total = sum(2 * r + 1 for r in range(hvd.size()))
    assert hvd.allreduce(mine, op=hvd.Average).tolist() == [int(total / hvd.size())] * 3


def test_allreduce_in_place_async_and_scale_factors():
    t = data(hvd.rank(), (6,), torch.float32).clone()
    h = hvd.allreduce_async_(t, name="inplace", op=hvd.Sum, prescale_factor=0.5,
                             postscale_factor=4.0)
    assert hvd.synchronize(h) is t
    want = sum(x * 0.5 for x in everyone((6,), torch.float32)) * 4.0
    assert torch.allclose(t, want)
    assert hvd.synchronize(h) is None  # a handle is synchronized once


def test_many_async_ops_fuse_and_poll():
    tensors = [data(hvd.rank(), (i + 1,), torch.float32, seed=i) for i in range(20)]
    handles = [hvd.allreduce_async(t, name="f%d" % i, op=hvd.Sum) for i, t in enumerate(tensors)]
    for i, h in enumerate(handles):
        want = sum(everyone((i + 1,), torch.float32, seed=i))
        assert torch.equal(hvd.synchronize(h), want)


def test_grouped_allreduce_in_and_out_of_place():
    tensors = [data(hvd.rank(), (3, i + 1), torch.float64, seed=i) for i in range(4)]
    want = [sum(everyone((3, i + 1), torch.float64, seed=i)) for i in range(4)]
    got = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    hvd.grouped_allreduce_(tensors, name="grouped_inplace", op=hvd.Sum)
    assert all(torch.equal(t, w) for t, w in zip(tensors, want))


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_with_rows_per_rank(dtype):
    rows = lambda r: r + 1  # noqa: E731
    mine = data(hvd.rank(), (rows(hvd.rank()), 3), dtype)
    want = torch.cat([data(r, (rows(r), 3), dtype) for r in range(hvd.size())])
    assert torch.equal(hvd.allgather(mine), want)


def test_grouped_allgather():
    mine = [data(hvd.rank(), (2, i + 1), torch.int64, seed=i) for i in range(3)]
    got = hvd.grouped_allgather(mine)
    for i, g in enumerate(got):
        assert torch.equal(g, torch.cat(everyone((2, i + 1), torch.int64, seed=i)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_from_every_root(dtype):
    for root in range(hvd.size()):
        mine = data(hvd.rank(), (4, 2), dtype)
        got = hvd.broadcast(mine, root)
        assert torch.equal(got, data(root, (4, 2), dtype))
        assert torch.equal(mine, data(hvd.rank(), (4, 2), dtype))
        hvd.broadcast_(mine, root, name="b_%d" % root)
        assert torch.equal(mine, data(root, (4, 2), dtype))


def test_alltoall_with_splits_and_even():
    size, rank = hvd.size(), hvd.rank()
    splits = [r + 1 for r in range(size)]  # rank r gets r + 1 rows from everyone
    rows = torch.arange(sum(splits), dtype=torch.float32).view(-1, 1) + 100 * rank
    got, received = hvd.alltoall(rows, torch.tensor(splits, dtype=torch.int32))
    assert received.dtype == torch.int32 and received.tolist() == [rank + 1] * size
    start = sum(splits[:rank])
    want = torch.cat([torch.arange(start, start + rank + 1, dtype=torch.float32).view(-1, 1)
                      + 100 * r for r in range(size)])
    assert torch.equal(got, want)
    even = torch.arange(2 * size, dtype=torch.int32) + 10 * rank
    got = hvd.alltoall(even)  # no splits: the first dimension in even parts, one tensor back
    assert got.tolist() == [2 * rank + i + 10 * r for r in range(size) for i in range(2)]


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_uneven_rows(op):
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1  # the first rank gets one row more
    parts = everyone((rows, 3), torch.float64, seed=2)
    total = sum(parts) / (size if op == "Average" else 1)
    start = rank * (rows // size) + min(rank, rows % size)
    n = rows // size + (1 if rank < rows % size else 0)
    got = hvd.reducescatter(data(rank, (rows, 3), torch.float64, seed=2), op=getattr(hvd, op))
    assert torch.allclose(got, total[start:start + n])


def test_grouped_reducescatter_with_scale_factors():
    size, rank = hvd.size(), hvd.rank()
    tensors = [data(rank, (size * 2, i + 1), torch.float32, seed=i) for i in range(3)]
    got = hvd.grouped_reducescatter(tensors, op=hvd.Sum, prescale_factor=2.0,
                                    postscale_factor=0.25)
    for i, g in enumerate(got):
        want = sum(everyone((size * 2, i + 1), torch.float32, seed=i)) * 0.5
        assert torch.equal(g, want[2 * rank:2 * rank + 2])


def test_barrier_and_join():
    hvd.barrier()
    if hvd.rank() == 0:
        last = hvd.join()
    else:
        total = hvd.allreduce(torch.ones(2), name="join_sum", op=hvd.Sum)
        assert total.tolist() == [hvd.size() - 1] * 2  # rank 0 joined: it adds zeros
        avg = hvd.allreduce(torch.ones(2), name="join_avg")
        assert torch.allclose(avg, torch.full((2,), (hvd.size() - 1) / hvd.size()))
        last = hvd.join()
    assert hvd.allgather_object(last) == [last] * hvd.size()
    if hvd.size() > 1:
        assert last != 0  # rank 0 joined first: the others' allreduces waited for it


def test_objects():
    obj = {"rank": hvd.rank(), "t": (1, 2.5, "x")}
    assert hvd.broadcast_object(obj, root_rank=hvd.size() - 1) == {"rank": hvd.size() - 1,
                                                                  "t": (1, 2.5, "x")}
    assert hvd.allgather_object(obj) == [{"rank": r, "t": (1, 2.5, "x")}
                                         for r in range(hvd.size())]


# --- Adasum -----------------------------------------------------------------------------------


# Rounding the float64 result once to the tensor's dtype, against the reference's float64;
# the same relative to the inputs' largest magnitude (9) where a result nearly cancels, as
# dot products summed in another order shift its coefficients by an ulp.
ADASUM_RTOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6,
               torch.float64: 1e-12}


def power_of_2_ranks():
    return hvd.size() & (hvd.size() - 1) == 0


@pytest.mark.parametrize("dtype,shape",
                         itertools.product([torch.float16, torch.bfloat16, torch.float32,
                                            torch.float64], [(17,), (2, 3, 4), (), (1001, 7)]))
def test_adasum_against_the_reference(dtype, shape):
    if not power_of_2_ranks():
        with pytest.raises(NotImplementedError, match="power-of-2 number of ranks.*has 3"):
            hvd.allreduce(data(hvd.rank(), shape, dtype), op=hvd.Adasum)
        return
    parts = everyone(shape, dtype, seed=3)
    want = adasum_reference(parts).reshape(shape)
    got = hvd.allreduce(data(hvd.rank(), shape, dtype, seed=3), op=hvd.Adasum)
    assert got.dtype == dtype and got.shape == parts[0].shape
    assert torch.allclose(got.double(), want, rtol=ADASUM_RTOL[dtype],
                          atol=9 * ADASUM_RTOL[dtype])
    every = hvd.allgather(got.reshape(1, -1))  # the same bits on every rank
    assert all(torch.equal(every[i], every[0]) for i in range(hvd.size()))


def test_adasum_adds_orthogonal_and_averages_parallel_tensors():
    if not power_of_2_ranks():
        pytest.skip("Adasum needs a power-of-2 number of ranks")
    n, r, p = 8, hvd.rank(), hvd.size()
    basis = torch.linalg.qr(torch.randn(n, p, generator=torch.Generator().manual_seed(7),
                                        dtype=torch.float64))[0]
    got = hvd.allreduce(basis[:, r].clone(), op=hvd.Adasum)
    assert torch.allclose(got, basis.sum(1), rtol=0, atol=1e-12)
    direction = torch.arange(1.0, n + 1, dtype=torch.float64)
    got = hvd.allreduce(direction * (r + 1), op=hvd.Adasum)
    assert torch.allclose(got, direction * (p + 1) / 2, rtol=0, atol=1e-12)


def test_adasum_in_place_grouped_async_and_scale_factors():
    if not power_of_2_ranks():
        pytest.skip("Adasum needs a power-of-2 number of ranks")
    t = data(hvd.rank(), (6,), torch.float32, seed=4).clone()
    h = hvd.allreduce_async_(t, name="adasum.inplace", op=hvd.Adasum, prescale_factor=0.5,
                             postscale_factor=4.0)
    assert hvd.synchronize(h) is t
    want = adasum_reference([x * 0.5 for x in everyone((6,), torch.float32, seed=4)]) * 4.0
    assert torch.allclose(t.double(), want, rtol=1e-6, atol=1e-6)
    shapes = [(3,), (2, 2)]
    mine = [data(hvd.rank(), s, torch.float64, seed=5 + i) for i, s in enumerate(shapes)]
    got = hvd.grouped_allreduce(mine, op=hvd.Adasum)
    for i, s in enumerate(shapes):  # each tensor combined on its own, as Horovod does
        want = adasum_reference(everyone(s, torch.float64, seed=5 + i)).reshape(s)
        assert torch.allclose(got[i], want, rtol=1e-12, atol=0)
    assert torch.equal(mine[0], data(hvd.rank(), (3,), torch.float64, seed=5))
