#!/usr/bin/python3
"""Recovery time of an elastic job against a full restart (issue 24; docs/benchmarks.md).

Both runs train examples/elastic_fashion_mnist with 3 workers on this machine and SIGKILL
worker 1 once it has committed --warm steps; recovery is the time from the kill to the
first step a surviving worker commits afterwards (its log's timestamp):
  elastic  chorusrun --min-np 2 --max-np 3: the two survivors re-form and go on at size 2;
  restart  chorusrun -np 3 --max-restarts 1: every process restarts and resumes from the
           checkpoint rank 0 writes every --checkpoint-every steps.
Each kill is a fresh job; medians over --kills kills per mode, alternating the modes.

  bench/elastic/recovery.py --build build [--kills 10]
"""

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cpu_model():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def lines(path):
    try:
        return [l.split() for l in path.read_text().splitlines() if l]
    except FileNotFoundError:
        return []


def steps(path):
    return [l for l in lines(path) if l[0] == "step" and len(l) >= 8]


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise RuntimeError("timed out waiting for " + what)


def one_kill(args, mode, workdir):
    logs = Path(workdir)
    example = [str(Path(args.build, "examples/elastic_fashion_mnist")), "--epochs", "50",
               "--log-dir", str(logs)]
    run = str(Path(args.build, "tools/chorusrun/chorusrun"))
    if mode == "elastic":
        cmd = [run, "--min-np", "2", "--max-np", "3", "-H", "localhost:3", *example]
        victim, survivors = logs / "w1.log", [logs / "w0.log", logs / "w2.log"]
    else:
        cmd = [run, "-np", "3", "--max-restarts", "1", *example,
               "--checkpoint", str(logs / "checkpoint.pt"),
               "--checkpoint-every", str(args.checkpoint_every)]
        victim, survivors = logs / "r1.log", [logs / "r0.log", logs / "r2.log"]
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        wait_for(lambda: len(steps(victim)) >= args.warm, 120, f"{args.warm} steps")
        pid = int([l for l in lines(victim) if l[0] == "start"][-1][1])
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)

        def first_step_after():
            # Elastic: a step at the new size. Restart: a step of the new attempt (after the
            # log's second "start"). A step at size 3 that ends after the kill is not one.
            times = []
            for path in survivors:
                log = lines(path)
                if mode == "restart":
                    starts = [i for i, l in enumerate(log) if l[0] == "start"]
                    log = log[starts[1]:] if len(starts) > 1 else []
                times += [float(l[7]) for l in log if l[0] == "step" and len(l) >= 8 and
                          (mode == "restart" or l[4] == "2")]
            return min(times) if times else None

        return wait_for(first_step_after, 120, "a step after the kill") - killed_at
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--warm", type=int, default=200, help="steps the victim commits first")
    p.add_argument("--checkpoint-every", type=int, default=100)
    args = p.parse_args()
    seconds = {"elastic": [], "restart": []}
    for i in range(args.kills):
        for mode in ("elastic", "restart"):
            with tempfile.TemporaryDirectory(prefix="chorus-recovery-") as d:
                s = one_kill(args, mode, d)
            seconds[mode].append(s)
            print(f"kill {i + 1} {mode}: {s:.3f} s", flush=True)
    e, r = statistics.median(seconds["elastic"]), statistics.median(seconds["restart"])
    print(f"\nCPU: {cpu_model()}, {os.cpu_count()} cores; {args.kills} kills per mode")
    print("| recovery (SIGKILL to first step after) | median | min | max |")
    print("|---|---|---|---|")
    for mode in ("elastic", "restart"):
        v = seconds[mode]
        print(f"| {mode} | {statistics.median(v):.3f} s | {min(v):.3f} s | {max(v):.3f} s |")
    print(f"\nrestart / elastic = {r / e:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
