"""Every rank of a chorusrun job runs this suite in step (as Horovod's own tests run): each
test calls the same collectives in the same order on every rank. chorus.torch is
initialised once for the session; tests that shut it down initialise it again."""

import pytest
import torch

import chorus.torch as hvd


@pytest.fixture(scope="session", autouse=True)
def job():
    torch.set_num_threads(1)
    hvd.init()
    yield
    if hvd.is_initialized():
        hvd.shutdown()


@pytest.fixture(autouse=True)
def in_step():
    """A test that failed on some ranks only must not leave the others waiting in the next
    one: every test starts after a barrier of every rank."""
    if not hvd.is_initialized():
        hvd.init()
    hvd.barrier()
    yield


def data(rank, shape, dtype, seed=0):
    """What rank `rank` contributes: integers in [-9, 9] (exact in every dtype and in sums
    of a few ranks), the same on every rank that computes it."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


def adasum_reference(parts):
    """Horovod's Adasum over float64 vectors, in rank order: (0, 1), (2, 3) ..., then their
    results pairwise; a coefficient is 1 where its squared norm is under sqrt(DBL_MIN)."""
    tiny = torch.finfo(torch.float64).tiny ** 0.5
    level = [p.double().flatten() for p in parts]
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[0::2], level[1::2]):
            dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
            ca = 1 - dot / aa / 2 if aa >= tiny else 1.0
            cb = 1 - dot / bb / 2 if bb >= tiny else 1.0
            nxt.append(ca * a + cb * b)
        level = nxt
    return level[0]
