#!/usr/bin/python3
"""The time of one small async allreduce when the caller waits for it and when it polls.

    chorusrun -np 2 /usr/bin/python3 bench/python/poll_latency.py [--bytes B] [--ops N]

Each mode submits `--ops` allreduces of `--bytes` float32 bytes one at a time (after 200
warm-up ops) and finishes each before the next: "wait" with hvd.synchronize, "busy-poll"
with `while not hvd.poll(h): pass` first, as a Horovod program may. With as many ranks
as cores, a busy poller occupies the core the engine thread needs; poll() yields the core
when the op is not done (docs/engine.md, "The engine thread"). Rank 0 prints the mean
microseconds per op of each mode.
"""
import argparse
import time

import torch

import chorus.torch as hvd


def per_op_us(tensor, ops, busy_poll):
    for _ in range(200):
        hvd.synchronize(hvd.allreduce_async(tensor, name="warm-up"))
    start = time.perf_counter()
    for _ in range(ops):
        handle = hvd.allreduce_async(tensor, name="op")
        if busy_poll:
            while not hvd.poll(handle):
                pass
        hvd.synchronize(handle)
    return (time.perf_counter() - start) / ops * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    if args.bytes < 4 or args.ops < 1:
        parser.error("--bytes must be >= 4 and --ops >= 1")
    hvd.init()
    tensor = torch.ones(args.bytes // 4)
    for mode, busy in (("wait", False), ("busy-poll", True)):
        us = per_op_us(tensor, args.ops, busy)
        if hvd.rank() == 0:
            print(f"{mode}: {us:.1f} us per allreduce of {args.bytes} bytes "
                  f"({hvd.size()} ranks)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
