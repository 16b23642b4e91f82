"""What Adasum costs against a sum allreduce, and against the gather-then-combine it replaced.

Run under chorusrun (every rank runs it): for each size, float32 tensors of that many bytes,
rounds that alternate the three ways (warm-up first), and rank 0 prints the median time of
each and the ratios:
  sum     hvd.allreduce(t, op=hvd.Sum): the ring / direct allreduce;
  adasum  hvd.allreduce(t, op=hvd.Adasum): the engine's vector-halving distance-doubling;
  gather  hvd.allgather of every rank's tensor, then the same binary tree combined in
          float64 here with torch (what chorus.torch did until 2026-11-29, in C++).

    chorusrun -np 2 /usr/bin/python3 bench/python/adasum_cost.py

and then 64 tensors of 4 KiB each in one grouped_allreduce, Sum and Adasum (fused by the
engine; CHORUS_FUSION_THRESHOLD=0 runs them one by one).
"""

import statistics
import sys
import time

import torch

import chorus.torch as hvd


def gather_then_combine(t):
    level = list(hvd.allgather(t.view(1, -1)).double())
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[0::2], level[1::2]):
            dot, aa, bb = a @ b, a @ a, b @ b
            nxt.append((1 - dot / aa / 2) * a + (1 - dot / bb / 2) * b)
        level = nxt
    return level[0].float()


def timed(fn, t):
    hvd.barrier()
    start = time.perf_counter()
    fn(t)
    return time.perf_counter() - start


def main():
    torch.set_num_threads(1)
    hvd.init()
    ways = {"sum": lambda t: hvd.allreduce(t, op=hvd.Sum),
            "adasum": lambda t: hvd.allreduce(t, op=hvd.Adasum),
            "gather": gather_then_combine}
    if hvd.rank() == 0:
        print("# %d ranks, float32; median seconds of each way, alternating rounds" % hvd.size())
        print("%12s %10s %10s %10s %14s %14s" % ("bytes", "sum", "adasum", "gather",
                                                   "adasum/sum", "gather/adasum"))
    for size in [1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26]:
        t = torch.randn(size // 4, generator=torch.Generator().manual_seed(hvd.rank()))
        rounds = 30 if size <= 1 << 22 else 8
        times = {k: [] for k in ways}
        for i in range(rounds + 3):
            for k, fn in ways.items():
                dt = timed(fn, t)
                if i >= 3:
                    times[k].append(dt)
        med = {k: statistics.median(v) for k, v in times.items()}
        if hvd.rank() == 0:
            print("%12d %10.6f %10.6f %10.6f %13.2fx %13.2fx" % (
                size, med["sum"], med["adasum"], med["gather"], med["adasum"] / med["sum"],
                med["gather"] / med["adasum"]))
            sys.stdout.flush()
    # Many small tensors at once (a model's parameters): the engine fuses them into one
    # collective unless CHORUS_FUSION_THRESHOLD=0.
    tensors = [torch.randn(1024) for _ in range(64)]
    for name, op in (("sum", hvd.Sum), ("adasum", hvd.Adasum)):
        times = [timed(lambda ts: hvd.grouped_allreduce(ts, op=op), tensors) for _ in range(53)]
        if hvd.rank() == 0:
            print("64 x 4 KiB, grouped_allreduce(op=%s): median %.6f s" % (
                name, statistics.median(times[3:])))
    hvd.shutdown()


if __name__ == "__main__":
    main()
