#!/usr/bin/python3
"""What a waiting worker's idle core costs on this machine (docs/benchmarks.md).

Two bare training workers (step_jitter.py's step: train_fashion_mnist.py's CNN, batch 64,
one thread, no communication), pinned to cpu 0 and cpu 1, in three ways per round:
  free    independent, as solo-2
  block   in lockstep, meeting at a barrier before every step that blocks in the kernel
          (multiprocessing.Barrier): the waiting worker's core goes idle
  spin    in lockstep, meeting at a barrier that spins on shared memory: its core stays busy
Prints each run's mean computation per step (the step without the barrier) and the pair's
samples/s, then the medians over the rounds of block / free, spin / free and spin / block.
Where a blocked wait lets the vCPU halt (a KVM guest without halt polling), computation after
a blocked wait runs slower, and spin / block is above 1: why chorus's waits on shared
memory yield for a while before they block (src/transport/progress.cc).

  bench/python/idle_cost.py [--rounds N] [--steps N]
"""
import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/usr/share/datasets/fashion-mnist"


def meet(mode, cpu, step, barrier, arrived):
    if mode == "block":
        barrier.wait()
    elif mode == "spin":
        arrived[cpu] = step + 1
        while arrived[1 - cpu] < step + 1:
            pass


def worker(cpu, mode, steps, warmup, barrier, arrived, results):
    os.sched_setaffinity(0, {cpu})
    sys.path.insert(0, HERE)
    from step_jitter import bare_training_step
    step = bare_training_step(DATA)
    computing, start = [], None
    for i in range(warmup + steps):
        meet(mode, cpu, i, barrier, arrived)
        if i == warmup:
            start = time.perf_counter()
        began = time.perf_counter()
        step(i)
        if i >= warmup:
            computing.append(time.perf_counter() - began)
    results.put((cpu, statistics.mean(computing), steps * 64 / (time.perf_counter() - start)))


def run(mode, steps, warmup):  # -> (mean computation ms per step, samples/s of the pair)
    ctx = mp.get_context("spawn")
    barrier, arrived, results = ctx.Barrier(2), ctx.RawArray("q", 2), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(cpu, mode, steps, warmup, barrier, arrived, results))
             for cpu in (0, 1)]
    for p in procs:
        p.start()
    got = [results.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit("idle_cost.py: a worker failed")
    return 1000 * statistics.mean(g[1] for g in got), sum(g[2] for g in got)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=30)
    args = p.parse_args()
    if os.cpu_count() < 2:
        sys.exit("idle_cost.py: needs 2 cpus")
    # As the training jobs run: one thread in every pool, glibc's heap as chorus.init() sets
    # it, OpenBLAS's kernels as bench/measure.sh picks them (step_jitter.py).
    sys.path.insert(0, HERE)
    from step_jitter import blas_env
    os.environ.update(blas_env())
    ratios = {"block / free": [], "spin / free": [], "spin / block": []}
    for i in range(1, args.rounds + 1):
        rate = {}
        line = "round %d:" % i
        for mode in ("free", "block", "spin"):
            ms, rate[mode] = run(mode, args.steps, args.warmup)
            line += "  %s %.2f ms/step computing, %.0f samples/s" % (mode, ms, rate[mode])
        print(line, flush=True)
        for name in ratios:
            a, b = name.split(" / ")
            ratios[name].append(rate[a] / rate[b])
    print("medians over %d rounds: " % args.rounds +
          ", ".join("%s %.3f" % (name, statistics.median(r)) for name, r in ratios.items()))


if __name__ == "__main__":
    main()
