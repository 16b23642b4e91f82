"""chorus.torch.BatchBalancer: shares that follow each rank's recorded time one step later,
identical on every rank and tiling the global batch; training through uneven shares equals
one process on the whole global batch; misuse is a ValueError with chorus's message."""

import pytest
import torch
import torch.nn.functional as F

import chorus.torch as hvd


def test_shares_tile_the_batch_and_follow_the_times():
    size, rank = hvd.size(), hvd.rank()
    b = hvd.BatchBalancer(min_share=0.25, name="test.balance")
    rows = 60 * size
    first = b.next(rows)
    assert first.rows == 60 and first.begin == 60 * rank and first.loss_scale == 1.0
    b.record(0.3 if rank == size - 1 else 0.1)  # the last rank three times slower
    s = b.next(rows)
    # rates 600 ... 600, 200: in proportion, whole rows by largest remainder.
    want = {1: [60], 2: [90, 30], 3: [77, 77, 26]}[size]
    assert b.last_rows == want
    assert (s.begin, s.end) == (sum(want[:rank]), sum(want[:rank + 1]))
    assert s.loss_scale == pytest.approx(size * want[rank] / rows)
    b.record(0.1)


def test_training_on_uneven_shares_equals_one_process_on_the_batch():
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    net = net.double()
    ref = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    ref = ref.double()
    ref.load_state_dict(net.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                   named_parameters=net.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    b = hvd.BatchBalancer(name="test.balance.train")
    rows = 16 * hvd.size()
    seen = []
    for step in range(4):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(rows, 5, generator=g, dtype=torch.float64)
        y = torch.randn(rows, 3, generator=g, dtype=torch.float64)
        s = b.next(rows)
        seen.append(s.rows)
        opt.zero_grad()
        (F.mse_loss(net(x[s.begin:s.end]), y[s.begin:s.end]) * s.loss_scale).backward()
        b.record(0.01 * (1 + hvd.rank()))  # rank r reports (1 + r) times rank 0's time
        opt.step()
        ref_opt.zero_grad()
        F.mse_loss(ref(x), y).backward()
        ref_opt.step()
        for p, q in zip(net.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-10, atol=1e-12), step
    assert seen[0] == 16 and (hvd.size() == 1 or seen[-1] != 16), seen  # even, then not


def test_misuse_is_a_value_error():
    b = hvd.BatchBalancer(name="test.balance.misuse")
    with pytest.raises(ValueError, match=r"record\(\) without next\(\)"):
        b.record(0.1)
    with pytest.raises(ValueError, match="rows cannot give each of"):
        b.next(hvd.size() - 1)
    b.next(hvd.size())
    with pytest.raises(ValueError, match="seconds must be finite and not negative"):
        b.record(float("nan"))
    b.record(0.0)
    with pytest.raises(ValueError, match=r"min_share must be in \(0, 1\]"):
        hvd.BatchBalancer(min_share=1.5)
