"""DistributedOptimizer, broadcasts of parameters and optimizer state, SyncBatchNorm:
results compared with one process training on the whole global batch. The optimizer's
tests run with each gradient reduced alone (bucket_bytes=0), with buckets of 64 bytes (one
parameter each, mostly) and with the default buckets (one for these small models)."""

import os
import warnings

import pytest
import torch
import torch.nn.functional as F

import chorus.torch as hvd

BATCH = 8  # per rank


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                               torch.nn.Linear(7, 3)).double()


def global_batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH * hvd.size(), 5, generator=g, dtype=torch.float64)
    y = torch.randn(BATCH * hvd.size(), 3, generator=g, dtype=torch.float64)
    return x, y


def mine(t):
    return t[hvd.rank() * BATCH:(hvd.rank() + 1) * BATCH]


def params_of(m):
    return torch.cat([p.detach().view(-1) for p in m.parameters()])


BUCKETS = [0, 64, 4 << 20]


def shares_memory():
    """Whether the job's ranks share this host's memory (chorusrun's default transport)."""
    return hvd.size() > 1 and os.environ.get("CHORUS_TRANSPORT", "auto") != "tcp"


def uses_buckets(opt, bucket_bytes):
    """Whether the optimizer's gradients live in shared memory: they must when the job's
    ranks share memory and buckets are on."""
    want = bucket_bytes > 0 and shares_memory()
    return (opt._reducer is not None and opt._reducer.buckets_active()) == want


def in_bucket(opt, p):
    """Whether the optimizer's reducer keeps p's gradient in a bucket."""
    return opt._reducer.in_bucket([id(q) for q in opt._reduced].index(id(p)))


def reference_step(ref, ref_opt, x, y):
    """One step of the single process on the whole global batch."""
    ref_opt.zero_grad()
    F.mse_loss(ref(x), y).backward()
    ref_opt.step()


def sgd_pair(bucket_bytes, **sgd):
    """The distributed model and its optimizer, and the single process's, from one start."""
    dist, ref = model(), model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1, **sgd),
                                   named_parameters=dist.named_parameters(),
                                   bucket_bytes=bucket_bytes)
    return dist, ref, opt, torch.optim.SGD(ref.parameters(), lr=0.1, **sgd)


def assert_equals_reference(dist, ref):
    """The distributed replica equals the single process, and every rank's replica is the
    same to the bit."""
    assert torch.allclose(params_of(dist), params_of(ref), rtol=0, atol=1e-12)
    every = hvd.allgather(params_of(dist).view(1, -1))
    assert all(torch.equal(every[0], row) for row in every), "replicas must be bit-identical"


@pytest.mark.parametrize("bucket_bytes", BUCKETS)
def test_training_equals_one_process_on_the_global_batch(bucket_bytes):
    dist, ref, opt, ref_opt = sgd_pair(bucket_bytes, momentum=0.9)
    for step in range(5):
        x, y = global_batch(step)
        opt.zero_grad()
        F.mse_loss(dist(mine(x)), mine(y)).backward()
        opt.step()
        reference_step(ref, ref_opt, x, y)
    assert_equals_reference(dist, ref)
    assert isinstance(opt, torch.optim.SGD)
    assert not hasattr(type(opt).step, "__wrapped__"), "no profiling range around the wait"
    assert uses_buckets(opt, bucket_bytes)


def test_step_is_a_profiling_range_only_while_a_profiler_runs():
    """torch does not wrap chorus.torch's step() (its Python range cost ~70 us a step); the
    step opens the same range itself when a profiler runs, around the wait."""
    dist, _, opt, _ = sgd_pair(BUCKETS[0])
    for profiling in (False, True):
        x, y = global_batch(0)
        opt.zero_grad()
        F.mse_loss(dist(mine(x)), mine(y)).backward()
        with torch.autograd.profiler.profile(enabled=profiling) as prof:
            opt.step()
        if profiling:
            steps = [e for e in prof.function_events if e.name == "Optimizer.step#SGD.step"]
            assert len(steps) == 2, "chorus.torch's step, and SGD's inside it"
            outer, inner = sorted(steps, key=lambda e: e.time_range.start)
            assert outer.time_range.end >= inner.time_range.end
    assert not hasattr(type(opt).step, "__wrapped__"), "torch put its own range around it"


def test_large_gradients_are_reduced_where_autograd_put_them():
    """With the ranks on one host, gradients of 1 MiB or more are born in shared memory
    (the shared heap) and reduced there in place; the small ones go to a bucket."""
    def wide(seed=0):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(5, 256), torch.nn.Tanh(),
                                   torch.nn.Linear(256, 600), torch.nn.Tanh(),
                                   torch.nn.Linear(600, 3)).double()
    dist, ref = wide(), wide()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    weight = dist[2].weight  # 256 x 600 doubles: 1.2 MB
    for step in range(4):
        x, y = global_batch(step)
        opt.zero_grad()
        F.mse_loss(dist(mine(x)), mine(y)).backward()
        born = weight.grad
        in_shared = hvd._ops.in_shared_memory(born.data_ptr(), born.numel() * born.element_size())
        assert in_shared == shares_memory()
        opt.step()
        assert weight.grad is born, "reduced where autograd put it"
        reference_step(ref, ref_opt, x, y)
    assert_equals_reference(dist, ref)
    if shares_memory():
        assert not in_bucket(opt, weight) and in_bucket(opt, dist[0].weight)


@pytest.mark.parametrize("bucket_bytes", BUCKETS[1:])
def test_gradients_set_to_none_or_replaced_are_reduced_all_the_same(bucket_bytes):
    dist, ref, opt, ref_opt = sgd_pair(bucket_bytes)
    for step in range(4):
        x, y = global_batch(60 + step)
        opt.zero_grad(set_to_none=step % 2 == 1)  # autograd allocates new gradients
        if step == 2:  # the user's own tensors as gradients
            for p in dist.parameters():
                p.grad = torch.zeros_like(p)
        F.mse_loss(dist(mine(x)), mine(y)).backward()
        opt.step()
        reference_step(ref, ref_opt, x, y)
    assert torch.allclose(params_of(dist), params_of(ref), rtol=0, atol=1e-12)
    assert uses_buckets(opt, bucket_bytes)


@pytest.mark.parametrize("bucket_bytes", BUCKETS)
def test_sparse_gradients_beside_dense_ones(bucket_bytes):
    torch.manual_seed(5)
    emb, head = torch.nn.Embedding(10, 3, sparse=True).double(), torch.nn.Linear(3, 1).double()
    ref_emb, ref_head = torch.nn.Embedding(10, 3).double(), torch.nn.Linear(3, 1).double()
    ref_emb.load_state_dict(emb.state_dict())
    ref_head.load_state_dict(head.state_dict())
    named = [("emb." + n, p) for n, p in emb.named_parameters()] + \
            [("head." + n, p) for n, p in head.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in named], lr=0.5),
                                   named_parameters=named, bucket_bytes=bucket_bytes)
    ref_opt = torch.optim.SGD(list(ref_emb.parameters()) + list(ref_head.parameters()), lr=0.5)
    ids = torch.arange(BATCH * hvd.size()) % 10
    for _ in range(2):
        opt.zero_grad()
        head(emb(mine(ids))).sum().div(BATCH).backward()  # averaged over the ranks
        opt.step()
        ref_opt.zero_grad()
        ref_head(ref_emb(ids)).sum().div(BATCH * hvd.size()).backward()
        ref_opt.step()
    # Sums of averages: the sparse path's rounding differs from one process's.
    assert torch.allclose(emb.weight, ref_emb.weight, atol=1e-12)
    assert torch.allclose(head.weight, ref_head.weight, atol=1e-12)


@pytest.mark.parametrize("bucket_bytes", BUCKETS)
def test_accumulation_over_backward_passes(bucket_bytes):
    dist, ref = model(), model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters(),
                                   backward_passes_per_step=2, bucket_bytes=bucket_bytes)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt.zero_grad()
    ref_opt.zero_grad()
    for step in range(2):
        x, y = global_batch(10 + step)
        F.mse_loss(dist(mine(x)), mine(y)).backward()
        F.mse_loss(ref(x), y).backward()
    opt.step()
    ref_opt.step()
    assert torch.allclose(params_of(dist), params_of(ref), rtol=0, atol=1e-12)
    x, y = global_batch(20)
    opt.zero_grad()
    for _ in range(2):
        F.mse_loss(dist(mine(x)), mine(y)).backward()
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
            F.mse_loss(dist(mine(x)), mine(y)).backward()
    opt.synchronize()
    opt.zero_grad()


@pytest.mark.parametrize("bucket_bytes", BUCKETS)
def test_parameters_unused_on_some_ranks_are_reduced_as_zeros(bucket_bytes):
    torch.manual_seed(1)
    a, b = torch.nn.Linear(4, 1).double(), torch.nn.Linear(4, 1).double()
    params = list(a.parameters()) + list(b.parameters())
    named = [("a." + n, p) for n, p in a.named_parameters()] + \
            [("b." + n, p) for n, p in b.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named,
                                   bucket_bytes=bucket_bytes)
    x = torch.ones(2, 4, dtype=torch.float64)
    before = b.weight.detach().clone()
    opt.zero_grad()
    (a(x).sum() if hvd.rank() == 0 else (a(x) + b(x)).sum()).backward()
    opt.step()
    # b's gradient, 2 per weight on every rank but rank 0 (which sends zeros), averaged.
    want = before - 2.0 * (hvd.size() - 1) / hvd.size()
    assert torch.allclose(b.weight, want)


def test_fp16_compression_and_predivide():
    dist, ref = model(), model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters(),
                                   compression=hvd.Compression.fp16,
                                   gradient_predivide_factor=2.0)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x, y = global_batch(30)
    opt.zero_grad()
    F.mse_loss(dist(mine(x)), mine(y)).backward()
    opt.step()
    ref_opt.zero_grad()
    F.mse_loss(ref(x), y).backward()
    ref_opt.step()
    assert torch.allclose(params_of(dist), params_of(ref), rtol=0, atol=1e-3)
    assert dist[0].weight.grad.dtype == torch.float64


def test_named_parameters_are_checked():
    m = model()
    with pytest.raises(ValueError, match="must be unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1),
                                 named_parameters=[("w", p) for p in m.parameters()])
    with pytest.raises(ValueError, match="were not named"):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1),
                                 named_parameters=list(m.named_parameters())[:1])
    with pytest.raises(ValueError, match="sequence of tuples"):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1),
                                 named_parameters=list(m.parameters()))
    unnamed = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1))
    assert sorted(unnamed._parameter_names.values()) == sorted(
        "allreduce.noname.0.%d" % i for i in range(4))


@pytest.mark.parametrize("bucket_bytes", BUCKETS)
def test_synchronize_then_step_and_misuse(bucket_bytes):
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(),
                                   bucket_bytes=bucket_bytes)
    x, y = global_batch(40)
    opt.zero_grad()
    F.mse_loss(m(mine(x)), mine(y)).backward()
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.01)
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()
    F.mse_loss(m(mine(x)), mine(y)).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    assert any("skip_synchronize" in str(w.message) for w in caught)


def test_hooks_run_in_cpp_unless_gradients_are_grouped_or_compressed():
    if hvd.size() < 2:
        pytest.skip("hooks only with two ranks")
    m = model()

    def wrap(**kwargs):
        return hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                        named_parameters=m.named_parameters(), **kwargs)
    assert wrap()._reducer is not None and wrap(op=hvd.Sum)._reducer is not None
    for python_hooks in (wrap(groups=2), wrap(compression=hvd.Compression.fp16)):
        assert python_hooks._reducer is None and len(python_hooks._grad_accs) == 4


@pytest.mark.parametrize("bucket_bytes", BUCKETS)
def test_an_optimizer_outlives_shutdown_and_init(bucket_bytes):
    """shutdown() detaches the C++ hooks (their engine is gone); after init() the optimizer
    reduces with hooks in Python, over the new world, to the same result."""
    dist, ref, opt, ref_opt = sgd_pair(bucket_bytes)
    for step in range(4):
        if step == 2:
            hvd.shutdown()
            hvd.init()
        x, y = global_batch(70 + step)
        opt.zero_grad()
        F.mse_loss(dist(mine(x)), mine(y)).backward()
        opt.step()
        reference_step(ref, ref_opt, x, y)
    assert_equals_reference(dist, ref)
    assert opt._reducer is None or hvd.size() == 1


def test_a_hook_that_cannot_submit_raises_from_backward():
    """An error in a C++ hook is the Python exception a call would raise, from backward():
    here the reduction's name is held by an op in flight (ValueError)."""
    if hvd.size() < 2:
        pytest.skip("hooks only with two ranks")
    m = torch.nn.Linear(2, 1).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(), bucket_bytes=0)
    # The reducer names the first optimizer's bias on this set "chorus.optimizer.<n>/bias":
    # hold that name with an op of our own (the engine's names are one namespace).
    name = "chorus.optimizer.%d/bias" % (_reducers_made() - 1)
    handle = hvd.allreduce_async(torch.ones(1), name=name)
    with pytest.raises(ValueError, match="in flight"):
        m(torch.ones(1, 2, dtype=torch.float64)).sum().backward()
    hvd.synchronize(handle)
    opt.synchronize()


def _reducers_made():
    from chorus.torch import optimizer
    return optimizer._reducers[hvd.global_process_set.process_set_id]


def test_broadcast_parameters_and_optimizer_state():
    m = model(seed=hvd.rank())  # every rank starts elsewhere
    lr = 0.1 * (hvd.rank() + 1)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=lr, betas=(0.8, 0.9)),
                                   named_parameters=m.named_parameters())
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    assert torch.equal(params_of(m), params_of(model(seed=0)))
    if hvd.rank() == 0:  # only the root has state yet (set gradients: no hooks fire)
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        opt._local_step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    group = opt.param_groups[0]
    assert group["lr"] == 0.1 and group["betas"] == (0.8, 0.9) and type(group["betas"]) is tuple
    state = opt.state_dict()["state"]
    every = hvd.allgather_object({k: {n: (v.tolist() if torch.is_tensor(v) else v)
                                      for n, v in s.items()} for k, s in state.items()})
    assert all(e == every[0] for e in every)
    hvd.broadcast_parameters(list(m.named_parameters()), root_rank=0)


def test_optimizer_on_a_process_set():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    # A proper subset: [0, 1] of 3 ranks, [0] of 2.
    first = hvd.add_process_set([0, 1] if hvd.size() > 2 else [0])
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(), process_set=first)
    x, y = global_batch(50)
    opt.zero_grad()
    F.mse_loss(m(mine(x)), mine(y)).backward()
    opt.step()
    every = hvd.allgather(params_of(m).view(1, -1))
    for r in range(hvd.size()):  # the set's members agree; a rank outside trained alone
        assert torch.equal(every[0], every[r]) == (r in first.ranks)
    hvd.remove_process_set(first)


def test_sync_batch_norm_equals_batch_norm_on_the_global_batch():
    torch.manual_seed(3)
    x_all = torch.randn(BATCH * hvd.size(), 4, 3, dtype=torch.float64)
    sync = hvd.SyncBatchNorm(4).double()
    plain = torch.nn.BatchNorm1d(4).double()
    x = mine(x_all).clone().requires_grad_()
    x_ref = x_all.clone().requires_grad_()
    out, ref = sync(x), plain(x_ref)
    assert torch.allclose(out, mine(ref), atol=1e-12)
    assert torch.allclose(sync.running_mean, plain.running_mean, atol=1e-12)
    assert torch.allclose(sync.running_var, plain.running_var, atol=1e-12)
    weights = torch.randn(x_all.shape, generator=torch.Generator().manual_seed(4),
                          dtype=torch.float64)
    (out * mine(weights)).sum().backward()
    (ref * weights).sum().backward()
    assert torch.allclose(x.grad, mine(x_ref.grad), atol=1e-10)
    assert torch.allclose(hvd.allreduce(sync.weight.grad, op=hvd.Sum), plain.weight.grad,
                          atol=1e-10)
    sync.eval()
    assert torch.allclose(sync(x.detach()), mine(plain.eval()(x_all)), atol=1e-12)
