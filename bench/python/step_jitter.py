#!/usr/bin/python3
"""What lockstep costs on this machine, predicted from step times alone (docs/benchmarks.md).

Runs the training step of train_fashion_mnist.py (the tutorial CNN, batch 64, no
communication, one thread in every pool) as two independent workers, one bound to cpu 0 and
one to cpu 1, and times every step. Prints each worker's step times (mean, median, p10 /
p90 / p99, standard deviation, lag-1 autocorrelation: how much a step's time says about the
next one's), then the rate the same steps would give in lockstep, where every step waits
for the slower worker of the pair (a free barrier), over the two workers' own rate (solo-2):

    lockstep / solo-2 = 2 / mean(max(a_i, b_i)) / (1 / mean(a) + 1 / mean(b))

and the same with the pairing shuffled (the two workers' jitter independent). Where this is
well below 1, no synchronous trainer with equal shares can reach solo-2 on the machine.
Then the same with the global batch (128) split as chorus::BatchBalancer splits it, by
each worker's speed in the step before, assuming a step's time proportional to its rows.

The workers' glibc malloc is set up as chorus.init() sets it (heap blocks up to 32 MiB,
trim above 256 MiB: MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_), since the training
jobs run that way; without it each step here took ~5000 page faults (perf stat).

  bench/python/step_jitter.py [--steps N] [--warmup N]

OpenBLAS: as bench/measure.sh, OPENBLAS_CORETYPE=SkylakeX when Debian's OpenBLAS falls
back to Prescott on an AVX-512 CPU and the variable is unset.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def bare_training_step(data):
    """The training step of train_fashion_mnist.py without communication, one thread:
    returns step(i), which runs step i (batch 64 of a shuffled order, SGD)."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    from train_fashion_mnist import Net, read_idx
    torch.set_num_threads(1)
    images = torch.from_numpy(read_idx(data + "/train-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx(data + "/train-labels-idx1-ubyte.gz").copy()).long()
    images = images.float().div_(255).unsqueeze(1)
    torch.manual_seed(1234)
    model = Net()
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    order = torch.randperm(images.shape[0])
    batches = order.shape[0] // 64

    def step(i):
        sel = order[(i % batches) * 64:(i % batches + 1) * 64]
        x, y = images.index_select(0, sel), labels.index_select(0, sel)
        sgd.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        sgd.step()
        loss.item()
        logits.argmax(1).eq(y).sum().item()
    return step


def worker(steps, warmup, data):
    step = bare_training_step(data)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        step(i)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    print(" ".join("%.7f" % t for t in times))


def blas_env():
    # One thread in every pool, as bench/measure.sh's training_setup.
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(256 << 20))
    if "OPENBLAS_CORETYPE" in env:
        return env
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                           text=True, env=dict(env, OPENBLAS_VERBOSE="2"))
    with open("/proc/cpuinfo") as f:
        avx512 = " avx512f" in f.read()
    if "Core: Prescott" in probe.stdout + probe.stderr and avx512:
        env["OPENBLAS_CORETYPE"] = "SkylakeX"
    return env


def autocorrelation(ms, lag=1):
    mean = statistics.mean(ms)
    var = sum((t - mean) ** 2 for t in ms)
    return sum((ms[i] - mean) * (ms[i + lag] - mean) for i in range(len(ms) - lag)) / var


def describe(name, ms):
    s = sorted(ms)
    p10, p90, p99 = (s[int(q * (len(s) - 1))] for q in (0.1, 0.9, 0.99))
    print("%-6s step ms: mean %.2f  median %.2f  p10 %.2f  p90 %.2f  p99 %.2f  sd %.2f"
          "  lag-1 autocorrelation %.2f"
          % (name, statistics.mean(ms), statistics.median(ms), p10, p90, p99,
             statistics.pstdev(ms), autocorrelation(ms)))


def solo_rate(a, b):  # 64-row steps per ms of the two workers on their own
    return 1 / statistics.mean(a) + 1 / statistics.mean(b)


def lockstep_ratio(a, b):
    return 2 / statistics.mean([max(x, y) for x, y in zip(a, b)]) / solo_rate(a, b)


def balanced_ratio(a, b, rows=128, least=32):
    # BatchBalancer's split from the step before (even at the first); per-row time of a
    # step taken as its 64-row time / 64.
    steps, na = [], rows // 2
    for x, y in zip(a, b):
        steps.append(max(na * x, (rows - na) * y) / 64)
        na = min(max(round(rows * y / (x + y)), least), rows - least)  # rates 1/x : 1/y
    return rows / 64 / statistics.mean(steps) / solo_rate(a, b)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.steps, args.warmup, args.data)
    if os.cpu_count() < 2:
        sys.exit("step_jitter.py: needs 2 cpus")
    env = blas_env()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--data", args.data]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env,
                              preexec_fn=lambda cpu=cpu: os.sched_setaffinity(0, {cpu}))
             for cpu in (0, 1)]
    outs = [proc.communicate()[0] for proc in procs]
    if any(proc.returncode != 0 for proc in procs):
        sys.exit("step_jitter.py: a worker failed")
    a, b = ([1000 * float(t) for t in out.split()] for out in outs)
    print("# step_jitter: %d steps after %d, OPENBLAS_CORETYPE=%s"
          % (args.steps, args.warmup, env.get("OPENBLAS_CORETYPE", "unset")))
    describe("cpu 0", a)
    describe("cpu 1", b)
    random.seed(1)
    shuffled = []
    for _ in range(200):
        c = b[:]
        random.shuffle(c)
        shuffled.append(lockstep_ratio(a, c))
    print("lockstep / solo-2 from these steps: %.3f (pairing shuffled: median %.3f)"
          % (lockstep_ratio(a, b), statistics.median(shuffled)))
    print("the same with the batch split by the step before's speed (BatchBalancer): %.3f"
          % balanced_ratio(a, b))


if __name__ == "__main__":
    main()
