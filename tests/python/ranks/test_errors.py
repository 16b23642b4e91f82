"""Bad input and disagreement: a Python exception of the right type, with chorus's message,
on every rank that called, and the job goes on afterwards."""

import time

import pytest
import torch

import chorus.torch as hvd


def needs_peers():
    if hvd.size() == 1:
        pytest.skip("needs several ranks")


def test_shape_dtype_op_and_root_mismatches_fail_on_every_rank():
    needs_peers()
    rank = hvd.rank()
    cases = [
        (lambda: hvd.allreduce(torch.zeros(3 + rank), name="shape"), "Mismatched allreduce tensor shapes"),
        (lambda: hvd.allreduce(torch.zeros(3, dtype=torch.float32 if rank else torch.float64),
                               name="dtype"), "Mismatched data types"),
        (lambda: hvd.allreduce(torch.zeros(3), name="op", op=hvd.Sum if rank else hvd.Max),
         "Mismatched reduce ops"),
        (lambda: hvd.broadcast(torch.zeros(3), rank, name="root"), "Mismatched broadcast root ranks"),
        (lambda: hvd.allgather(torch.zeros(2, 1 + rank), name="gather"),
         "dimensions after the first must agree"),
        (lambda: hvd.allreduce(torch.zeros(2), name="kind") if rank else
         hvd.allgather(torch.zeros(2), name="kind"), "Mismatched operations"),
    ]
    for call, text in cases:
        with pytest.raises(hvd.HorovodInternalError) as e:
            call()
        assert isinstance(e.value, hvd.MismatchError) and isinstance(e.value, RuntimeError)
        assert text in str(e.value), str(e.value)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()  # still usable


def test_second_op_under_a_running_name_is_a_value_error():
    t = torch.ones(4)
    if hvd.rank() == 0:  # cannot finish before the other ranks submit theirs, after the barrier
        h = hvd.allreduce_async(t, name="dup", op=hvd.Sum)
        with pytest.raises(ValueError, match="a second op named 'dup'"):
            hvd.allreduce_async(t, name="dup", op=hvd.Sum)
    hvd.barrier()
    if hvd.rank() != 0:
        h = hvd.allreduce_async(t, name="dup", op=hvd.Sum)
    assert hvd.synchronize(h).eq(hvd.size()).all()
    hvd.synchronize(hvd.allreduce_async(t, name="dup", op=hvd.Sum))  # free again once synchronized


def test_a_finished_op_left_behind_frees_its_name_once_a_later_op_is_synchronized():
    t = torch.ones(4)
    h = hvd.allreduce_async(t, name="done", op=hvd.Sum)
    while not hvd.poll(h):
        time.sleep(0.001)
    with pytest.raises(ValueError, match="a second op named 'done'"):
        hvd.allreduce_async(t, name="done", op=hvd.Sum)  # finished, but nothing after it yet
    hvd.barrier()  # the program moved on: h is left behind
    again = hvd.allreduce_async(t, name="done", op=hvd.Sum)
    assert hvd.synchronize(again).eq(hvd.size()).all()
    assert hvd.synchronize(h).eq(hvd.size()).all()


@pytest.mark.parametrize("bad,text", [
    (lambda: torch.zeros(2, dtype=torch.bool), "dtype Bool"),
    (lambda: torch.zeros(2, dtype=torch.complex64), "dtype ComplexFloat"),
    (lambda: torch.zeros(4, 4).t(), "not contiguous"),
    (lambda: torch.zeros(2, device="meta"), "tensors on meta"),
])
def test_unsupported_tensors_are_value_errors(bad, text):
    with pytest.raises(ValueError, match=text):
        hvd.allreduce(bad(), name="bad")
    with pytest.raises(ValueError, match=text):
        hvd.allgather(bad(), name="bad")


def test_bad_arguments():
    size = hvd.size()
    if size > 1:
        with pytest.raises(ValueError, match="not a multiple of"):
            hvd.alltoall(torch.zeros(size + 1))
    with pytest.raises(ValueError, match="splits sum to"):
        hvd.alltoall(torch.zeros(size + 1), splits=torch.ones(size, dtype=torch.int32))
    with pytest.raises(ValueError, match="int32"):
        hvd.alltoall(torch.zeros(size), splits=torch.ones(size, dtype=torch.float32))
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.reducescatter(torch.tensor(1.0))
    with pytest.raises(ValueError, match="root rank 99"):
        hvd.broadcast(torch.zeros(1), 99)
    with pytest.raises(NotImplementedError, match="Adasum in allreduce only"):
        hvd.reducescatter(torch.zeros(4), op=hvd.Adasum)
    with pytest.raises(ValueError, match="Adasum needs floating-point tensors, got Int"):
        hvd.allreduce(torch.zeros(1, dtype=torch.int32), op=hvd.Adasum)
    with pytest.raises(ValueError, match="unknown reduction op"):
        hvd.allreduce(torch.zeros(1), op=42)
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(torch.zeros(1), op=hvd.Sum, average=True)


def test_ops_before_init_and_after_shutdown():
    hvd.shutdown()
    assert not hvd.is_initialized()
    for call in (hvd.rank, hvd.size, lambda: hvd.allreduce(torch.zeros(1))):
        with pytest.raises(ValueError, match="not been initialized"):
            call()
    hvd.init()
    assert hvd.is_initialized()


def test_a_wait_is_bounded_and_the_op_stays_pending(monkeypatch):
    needs_peers()
    # Rank 0 waits for an op the others submit only later: CHORUS_TIMEOUT_SECONDS bounds the
    # wait, and the op, still pending, completes once they do.
    if hvd.rank() == 0:
        h = hvd.allreduce_async(torch.ones(1), name="late", op=hvd.Sum)
        monkeypatch.setenv("CHORUS_TIMEOUT_SECONDS", "0.3")
        with pytest.raises(hvd.CollectiveTimeout, match="CHORUS_TIMEOUT_SECONDS"):
            hvd.synchronize(h)
        monkeypatch.undo()
        assert not hvd.poll(h)
    hvd.barrier()
    if hvd.rank() != 0:
        hvd.allreduce(torch.ones(1), name="late", op=hvd.Sum)
    else:
        assert hvd.synchronize(h).item() == hvd.size()
