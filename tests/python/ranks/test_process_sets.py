"""Process sets: registration on every rank, process_set= on every op (results within the
set, roots as ranks of the whole job), disjoint sets at once, removal, bad input."""

import pytest
import torch

import chorus.torch as hvd
from conftest import data


@pytest.fixture
def halves():
    """Even and odd ranks (at 2 ranks: [0] and [1])."""
    even = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 0])
    odd = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 1]) \
        if hvd.size() > 1 else None
    mine = even if hvd.rank() % 2 == 0 else odd
    yield mine
    hvd.remove_process_set(even)
    if odd is not None:
        hvd.remove_process_set(odd)


def test_every_op_stays_within_the_set(halves):
    ps = halves
    ranks = ps.ranks
    assert ps.included() and ps.size() == len(ranks) and ps.rank() == ranks.index(hvd.rank())
    mine = data(hvd.rank(), (3,), torch.float32)
    want = sum(data(r, (3,), torch.float32) for r in ranks)
    assert torch.equal(hvd.allreduce(mine, op=hvd.Sum, process_set=ps), want)
    assert torch.allclose(hvd.allreduce(mine, process_set=ps), want / len(ranks))
    assert torch.equal(hvd.allgather(mine.view(1, 3), process_set=ps),
                       torch.stack([data(r, (3,), torch.float32) for r in ranks]))
    for root in ranks:  # roots are ranks of the whole job
        assert torch.equal(hvd.broadcast(mine, root, process_set=ps), data(root, (3,), torch.float32))
    rows = torch.full((len(ranks), 1), float(hvd.rank()))
    got, received = hvd.alltoall(rows, torch.ones(len(ranks), dtype=torch.int32), process_set=ps)
    assert got.view(-1).tolist() == [float(r) for r in ranks]
    scattered = hvd.reducescatter(torch.ones(len(ranks), 2), op=hvd.Sum, process_set=ps)
    assert scattered.tolist() == [[float(len(ranks))] * 2]
    grouped = hvd.grouped_allreduce([mine, mine * 2], op=hvd.Sum, process_set=ps)
    assert torch.equal(grouped[1], want * 2)
    hvd.barrier(process_set=ps)
    assert hvd.broadcast_object({"x": hvd.rank()}, root_rank=ranks[-1], process_set=ps) == \
        {"x": ranks[-1]}


def test_sets_run_at_the_same_time(halves):
    # Each half submits twenty ops at once under the same names; the halves never wait
    # for each other.
    handles = [hvd.allreduce_async(torch.full((100,), float(i)), name="n%d" % i, op=hvd.Sum,
                                   process_set=halves) for i in range(20)]
    for i, h in enumerate(handles):
        assert hvd.synchronize(h)[0].item() == i * halves.size()


def test_registration_errors():
    with pytest.raises(ValueError, match="integers"):
        hvd.ProcessSet(["a"])
    ps = hvd.add_process_set([0])
    with pytest.raises(ValueError, match="has the ranks \\[0\\] already"):
        hvd.add_process_set([0])
    if hvd.size() > 1:
        with pytest.raises(ValueError, match="is every rank"):
            hvd.add_process_set(list(range(hvd.size())))
    with pytest.raises(ValueError, match="out of range"):
        hvd.add_process_set([0, hvd.size()])
    if hvd.rank() != 0:
        with pytest.raises(ValueError, match="not in process set"):
            hvd.allreduce(torch.zeros(1), process_set=ps)
        with pytest.raises(ValueError, match="not part of process set"):
            ps.rank()
    assert hvd.remove_process_set(ps)
    assert ps.process_set_id is None and not hvd.remove_process_set(ps)
    assert not hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.zeros(1), process_set=ps)


def test_sets_given_to_init():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    size = hvd.size()
    hvd.shutdown()
    first = hvd.ProcessSet([0])
    last = hvd.ProcessSet([size - 1])
    hvd.init(process_sets=[first, last])
    assert first.process_set_id == 1 and last.process_set_id == 2
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    mine = first if hvd.rank() == 0 else last if hvd.rank() == hvd.size() - 1 else None
    if mine is not None:
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=mine).item() == 1
    hvd.remove_process_set(first)
    hvd.remove_process_set(last)
