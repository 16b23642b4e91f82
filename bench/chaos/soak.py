#!/usr/bin/python3
"""Chaos soak (issue 28; docs/fuzzing.md, "Chaos soak"): a 3-worker Fashion-MNIST training
under chorusrun while a driver injects faults at random intervals, then checks how it ended.

The job: examples/keras_fashion_mnist (Trainer.fit, MultiWorkerMirroredStrategy) on two
"hosts", network namespaces of this machine reached through tests/tools/fake_ssh.sh (2 slots
and 1 slot; shared memory within a host, TCP between), with ModelCheckpoint at every
epoch end and, in restart mode, BackupAndRestore every --save-freq steps:
  --mode restart  chorusrun -np 3 --max-restarts 1000: a failure restarts every worker,
                  which resume from the newest backup that verifies;
  --mode elastic  chorusrun --min-np 1 --max-np 3 and fit(elastic): the survivors go on,
                  a failed slot gets a new worker after --blacklist-cooldown.
Faults, until --minutes have passed (then the job finishes undisturbed):
  kill     SIGKILL a random worker
  stop     SIGSTOP a random worker for 1 to 1.5x CHORUS_TIMEOUT_SECONDS, then SIGCONT
  corrupt  flip bytes in a random file of the newest committed checkpoint or backup (a
           backup: then kill a worker, so that the restart has to read it)
  junk     connections to the job's store carrying random bytes, a frame announcing 4 GiB,
           and idle ones held open for seconds
  link     the second host's link down for 1 to 1.5x CHORUS_TIMEOUT_SECONDS, then up
At the end: the job exited 0; its final validation accuracy is within 1 point of an
undisturbed run's (--baseline-accuracy, or one run first); every checkpoint either verifies
(MANIFEST and file SHA-256, checked here independently of chorus) or is one the driver
corrupted; chorus's own side evaluator, given the checkpoint directory, evaluates the newest
checkpoint to the job's final accuracy; no worker, launcher or /dev/shm file is left.
Needs root and iproute2 (namespaces).

  bench/chaos/soak.py --build build --minutes 30 --mode restart
"""

import argparse
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = "/usr/share/datasets/fashion-mnist"


def cpu_model():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def sh(cmd):
    return subprocess.run(["sh", "-c", cmd], capture_output=True).returncode


class Hosts:
    """Two network namespaces on a bridge (10.N.0.1 on this side), 10.N.0.2 and 10.N.0.3."""

    def __init__(self):
        tag = os.getpid() % 10000
        self.net, self.bridge = f"10.{100 + tag % 50}.0.", f"cs{tag}b"
        self.names = [f"chorus_soak{tag}_{k}" for k in (1, 2)]
        self.inner = [f"cs{tag}i{k}" for k in (1, 2)]
        self.outer = [f"cs{tag}o{k}" for k in (1, 2)]
        self.addrs = [self.net + str(k + 2) for k in range(2)]
        ok = sh(f"ip link add {self.bridge} type bridge && ip addr add {self.net}1/24 dev "
                f"{self.bridge} && ip link set {self.bridge} up") == 0
        for name, inner, outer, addr in zip(self.names, self.inner, self.outer, self.addrs):
            ok = ok and sh(
                f"ip netns add {name} && ip link add {outer} type veth peer name {inner} netns "
                f"{name} && ip link set {outer} master {self.bridge} && ip link set {outer} up "
                f"&& ip -n {name} addr add {addr}/24 dev {inner} && ip -n {name} link set "
                f"{inner} up && ip -n {name} link set lo up") == 0
        if not ok:
            self.remove()
            raise SystemExit("soak: could not create network namespaces (needs root, iproute2)")

    def link(self, up):
        return sh(f"ip -n {self.names[1]} link set {self.inner[1]} {'up' if up else 'down'}")

    def remove(self):
        for name, outer in zip(self.names, self.outer):
            sh(f"ip link del {outer}")
            sh(f"ip netns del {name}")
        sh(f"ip link del {self.bridge}")


def job_command(args, hosts, work, mode):
    run = str(Path(args.build, "tools/chorusrun/chorusrun"))
    example = [str(Path(args.build, "examples/keras_fashion_mnist")), "--data", DATA,
               "--epochs", str(args.epochs), "--batch", str(args.batch),
               "--train-samples", str(args.train_samples),
               "--checkpoint-dir", str(work / "ckpt"), "--checkpoint-freq", "0",
               "--save-freq", str(args.save_freq)]
    placement = ["-H", f"{hosts.addrs[0]}:2,{hosts.addrs[1]}:1",
                 "--rsh", str(REPO / "tests/tools/fake_ssh.sh")]
    if mode == "elastic":
        return [run, "--min-np", "1", "--max-np", "3", *placement, "--blacklist-cooldown",
                "5", *example, "--elastic", "--global-batch", str(3 * args.batch)]
    return [run, "-np", "3", *placement, "--max-restarts", "1000", *example, "--backup-dir",
            str(work / "backup")]


def job_env(args, hosts):
    return dict(os.environ, CHORUS_SECRET="chorus-soak-" + os.urandom(8).hex(),
                CHORUS_TIMEOUT_SECONDS=str(args.timeout), OMP_NUM_THREADS="1",
                FAKE_SSH_NETNS=" ".join(f"{a}={n}" for a, n in zip(hosts.addrs, hosts.names)))


def workers(example, work):
    """Pids of this job's training processes (not their sh or ip wrappers)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "exe") != example:
                continue
            if str(work) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def store_address(pids):
    for pid in pids:
        try:
            for var in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                if var.startswith(b"CHORUS_STORE_ADDR="):
                    host, port = var.split(b"=", 1)[1].decode().rsplit(":", 1)
                    return host, int(port)
        except OSError:
            pass
    return None


def committed(directory):
    """Committed checkpoint directories (ckpt-N, backup-N), oldest first."""
    found = [p for p in Path(directory).glob("*-*") if re.fullmatch(r"[a-z]+-\d+", p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def verifies(checkpoint):
    """The MANIFEST's own SHA-256 and every listed file's size and SHA-256 (docs/checkpoints.md)."""
    try:
        text = (checkpoint / "MANIFEST").read_bytes()
        body, _, last = text.rstrip(b"\n").rpartition(b"\n")
        if last != b"manifest-sha256 " + hashlib.sha256(body + b"\n").hexdigest().encode():
            return False
        for line in body.decode().splitlines():
            words = line.split()
            if words[0] == "file":
                data = (checkpoint / words[1]).read_bytes()
                if len(data) != int(words[2]) or hashlib.sha256(data).hexdigest() != words[4]:
                    return False
        return True
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return False


class Driver:
    def __init__(self, args, hosts, work, example, rng):
        self.args, self.hosts, self.work, self.example, self.rng = args, hosts, work, example, rng
        self.injected = {k: 0 for k in ("kill", "stop", "corrupt", "junk", "link")}
        self.skipped = {k: 0 for k in self.injected}
        self.corrupted = []  # (checkpoint dir, file, sha256 of the corrupted bytes)
        self.pending = []  # (when, action) to undo a stop or a link drop
        self.events = []

    def log(self, what):
        self.events.append(f"{time.strftime('%H:%M:%S')} {what}")
        print("soak:", what, flush=True)

    def pause(self):
        return self.rng.uniform(1.0, 1.5 * self.args.timeout)

    def kill(self):
        pids = workers(self.example, self.work)
        if not pids:
            return False
        pid = self.rng.choice(pids)
        os.kill(pid, signal.SIGKILL)
        self.log(f"kill pid {pid}")
        return True

    def stop(self):
        pids = workers(self.example, self.work)
        if not pids:
            return False
        pid, seconds = self.rng.choice(pids), self.pause()
        os.kill(pid, signal.SIGSTOP)
        self.pending.append((time.time() + seconds, lambda: self._cont(pid)))
        self.log(f"stop pid {pid} for {seconds:.1f} s")
        return True

    def _cont(self, pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def corrupt(self):
        newest = [c for d in ("ckpt", "backup") for c in committed(self.work / d)[-1:]]
        if not newest:
            return False
        checkpoint = self.rng.choice(newest)
        try:
            files = sorted(p for p in checkpoint.iterdir() if p.is_file())
            target = self.rng.choice(files)
            data = bytearray(target.read_bytes())
            for _ in range(min(8, len(data))):
                data[self.rng.randrange(len(data))] ^= self.rng.randrange(1, 256)
            with open(target, "r+b") as f:
                f.write(data)
        except (OSError, IndexError):
            return False  # replaced or deleted meanwhile
        self.corrupted.append((checkpoint, target.name, hashlib.sha256(data).hexdigest()))
        self.log(f"corrupt {checkpoint.name}/{target.name}")
        if checkpoint.name.startswith("backup") and self.kill():
            self.injected["kill"] += 1  # a restart reads it before a newer backup replaces it
        return True

    def junk(self):
        address = store_address(workers(self.example, self.work))
        if address is None:
            return False
        idle = []
        for i in range(20):
            try:
                s = socket.create_connection(address, timeout=2)
                if i % 4 == 3:
                    idle.append(s)  # says nothing, held open
                    continue
                if i % 4 == 2:
                    s.sendall(b"\xff\xff\xff\xff" + os.urandom(60))  # a 4 GiB frame
                else:
                    s.sendall(os.urandom(self.rng.randrange(1, 65536)))
                s.close()
            except OSError:
                pass
        self.pending.append((time.time() + self.rng.uniform(1, 5),
                             lambda: [s.close() for s in idle]))
        self.log(f"junk to store {address[0]}:{address[1]} (20 connections, {len(idle)} idle)")
        return True

    def link(self):
        seconds = self.pause()
        if self.hosts.link(False) != 0:
            return False
        self.pending.append((time.time() + seconds, lambda: self.hosts.link(True)))
        self.log(f"link of host 2 down for {seconds:.1f} s")
        return True

    def inject(self):
        kinds = ["kill"] * 3 + ["stop"] * 2 + ["junk"] * 2 + ["link"] * 2 + ["corrupt"] * 2
        kind = self.rng.choice(kinds)
        if getattr(self, kind)():
            self.injected[kind] += 1
        else:
            self.skipped[kind] += 1

    def undo_due(self, everything=False):
        now = time.time()
        for item in [p for p in self.pending if everything or p[0] <= now]:
            self.pending.remove(item)
            item[1]()


def run_job(args, hosts, work, mode, driver=None):
    """Runs the job (with faults if `driver`); returns (exit code, output, seconds)."""
    out_path = work / f"{mode}.out"
    begin = time.time()
    with open(out_path, "w") as out:
        job = subprocess.Popen(job_command(args, hosts, work, mode), stdout=out,
                               stderr=subprocess.STDOUT, env=job_env(args, hosts),
                               start_new_session=True)
        next_fault = begin + args.first_fault
        try:
            while job.poll() is None:
                if time.time() - begin > args.job_timeout * 60:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
                    raise SystemExit(f"soak: the job hung past {args.job_timeout} minutes")
                if driver:
                    driver.undo_due()
                    if time.time() >= next_fault and time.time() - begin < args.minutes * 60:
                        driver.inject()
                        next_fault = time.time() + driver.rng.uniform(args.gap_min, args.gap_max)
                time.sleep(0.1)
        finally:
            if driver:
                driver.undo_due(everything=True)
    return job.returncode, out_path.read_text(), time.time() - begin


def final_accuracy(output):
    m = re.findall(r"final: .* val_accuracy ([0-9.]+)", output)
    return float(m[-1]) if m else None


def side_evaluation(args, work):
    """The newest verifying checkpoint, evaluated by chorus's side evaluator."""
    ckpts = committed(work / "ckpt")
    if not ckpts:
        return None, ""
    last = ckpts[-1].name.split("-")[1]
    cmd = [str(Path(args.build, "examples/keras_fashion_mnist")), "--data", DATA,
           "--side-eval", str(work / "ckpt"), "--last-step", last, "--logdir",
           str(work / "side")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    found = re.findall(r"checkpoint step (\d+) val_loss [0-9.]+ val_accuracy ([0-9.]+)", r.stdout)
    return (int(found[-1][0]), float(found[-1][1])) if found else None, r.stdout + r.stderr


def leftovers(example, work, shm_before):
    procs = workers(example, work)
    launchers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and
                 str(work) in _cmdline(p)]
    shm = sorted(set(os.listdir("/dev/shm")) - shm_before)
    return procs, launchers, shm


def _cmdline(proc):
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--mode", choices=["restart", "elastic"], default="restart")
    p.add_argument("--minutes", type=float, default=30, help="how long faults are injected")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch", type=int, default=64, help="per worker")
    p.add_argument("--train-samples", type=int, default=60000)
    p.add_argument("--save-freq", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--timeout", type=float, default=10, help="CHORUS_TIMEOUT_SECONDS")
    p.add_argument("--gap-min", type=float, default=15, help="seconds between faults, from")
    p.add_argument("--gap-max", type=float, default=45, help="... to")
    p.add_argument("--first-fault", type=float, default=20, help="seconds after the start")
    p.add_argument("--job-timeout", type=float, default=120, help="minutes before a hang")
    p.add_argument("--baseline-accuracy", type=float, help="skip the undisturbed run")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--report", help="write the report as JSON here too")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("soak: needs root (network namespaces)")
    example = os.path.realpath(Path(args.build, "examples/keras_fashion_mnist"))
    shm_before = set(os.listdir("/dev/shm"))
    hosts = Hosts()
    try:
        with tempfile.TemporaryDirectory(prefix="chorus-soak-") as tmp:
            report = soak(args, hosts, Path(tmp), example, shm_before)
    finally:
        hosts.remove()
    print(json.dumps(report, indent=2))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["passed"] else 1


def soak(args, hosts, tmp, example, shm_before):
    baseline = args.baseline_accuracy
    baseline_seconds = None
    if baseline is None:
        base = tmp / "baseline"
        base.mkdir()
        code, out, baseline_seconds = run_job(args, hosts, base, args.mode)
        baseline = final_accuracy(out)
        if code != 0 or baseline is None:
            raise SystemExit("soak: the undisturbed run failed:\n" + out[-4000:])
        print(f"soak: undisturbed run: val_accuracy {baseline} in {baseline_seconds:.0f} s",
              flush=True)
    work = tmp / "chaos"
    work.mkdir()
    rng = random.Random(args.seed)
    driver = Driver(args, hosts, work, example, rng)
    code, out, seconds = run_job(args, hosts, work, args.mode, driver)
    accuracy = final_accuracy(out)
    ckpts = committed(work / "ckpt")
    corrupted = {(str(c), f, h) for c, f, h in driver.corrupted}
    bad = []
    for c in ckpts:
        if verifies(c):
            continue
        still = any(str(c) == cc and (c / f).exists() and
                    hashlib.sha256((c / f).read_bytes()).hexdigest() == h
                    for cc, f, h in corrupted)
        if not still:
            bad.append(c.name)  # fails to verify, and not by the driver's hand
    side, side_out = side_evaluation(args, work)
    procs, launchers, shm = leftovers(example, work, shm_before)
    restarts = len(re.findall(r"restarting the job", out))
    rounds = len(re.findall(r"elastic round \d+", out))
    skipped = len(re.findall(r"skipping checkpoint", out))
    checks = {
        "job exited 0": code == 0,
        "accuracy within 1 point of undisturbed": accuracy is not None and
        abs(accuracy - baseline) <= 0.01,
        "every checkpoint verifies or was corrupted by the driver": not bad,
        "side evaluator: newest checkpoint gives the final accuracy": side is not None and
        accuracy is not None and abs(side[1] - accuracy) <= 2e-4,
        "no worker or launcher left": not procs and not launchers,
        "no /dev/shm file left": not shm,
    }
    return {
        "cpu": cpu_model(), "cores": os.cpu_count(), "mode": args.mode, "seed": args.seed,
        "fault_minutes": args.minutes, "job_seconds": round(seconds),
        "baseline_seconds": baseline_seconds and round(baseline_seconds),
        "exit_code": code, "final_val_accuracy": accuracy, "baseline_val_accuracy": baseline,
        "injected": driver.injected, "not_injectable_at_the_time": driver.skipped,
        "restarts": restarts, "elastic_rounds": rounds,
        "checkpoints_skipped_at_restore": skipped, "checkpoints": len(ckpts),
        "checkpoints_failing_not_corrupted": bad, "side_evaluation": side,
        "leftover_pids": procs + launchers, "leftover_shm": shm, "checks": checks,
        "passed": all(checks.values()), "events": driver.events,
        "output_tail": out[-3000:] if not all(checks.values()) else "",
        "side_output_tail": side_out[-1500:] if side is None else "",
    }


if __name__ == "__main__":
    sys.exit(main())
