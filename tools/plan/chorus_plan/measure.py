"""chorus-plan --measure: the inputs measured on this machine, by running chorus's own tools.

- reduction rate: reduce_bench's float32 sum in cache (the ring reduces 128 KiB blocks as
  they arrive), the faster kernel;
- intra level: chorus-bench, 2 ranks under chorusrun on this host (shared memory), fitted;
- inter level: chorus-bench, 2 ranks over TCP: on loopback, or with --netns-rate in two
  network namespaces joined by a bridge, each link shaped by tc tbf in both directions
  (as bench/ps_vs_ring/run.sh shapes its hosts), fitted;
- compute: the program after -- on one worker under chorusrun: --batch over the last
  "N samples/s" (or images/s) it prints; gradient bytes from "N parameters" if it prints
  that (float32), else --gradient-bytes must be given; with --ranks-per-host L > 1, L such
  runs at once give the compute of each worker of a full host (--host-compute);
- step spread: the timelines (CHORUS_TIMELINE) of those L runs, or of the one-worker run
  when L = 1 (--step-timelines); cores: the CPUs this process may run on (--cores-per-host);
- tensors and overlap: a 2-worker run of the program with CHORUS_TIMELINE (inputs.py).

Given inputs are never overwritten. Each measurement prints what it ran on stderr.
"""
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile

from . import inputs
from .inputs import InputError


def _log(msg):
    print("chorus-plan --measure: %s" % msg, file=sys.stderr, flush=True)


def _cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown CPU"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def _run(cmd, env=None, timeout=900):
    _log("running " + " ".join(cmd))
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError("%s: %s" % (cmd[0], e)) from None
    if r.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (cmd[0], r.returncode,
                                                      (r.stderr or r.stdout).strip()[-600:]))
    return r.stdout


def _tools(args):
    build = args.build
    if build is None:
        here = os.path.dirname(os.path.realpath(sys.argv[0]))
        build = os.path.join(here, "..", "..", "build")
    paths = {"bench": os.path.join(build, "bench", "chorus-bench"),
             "reduce": os.path.join(build, "bench", "reduce_bench"),
             "chorusrun": os.path.join(build, "tools", "chorusrun", "chorusrun")}
    for name, p in paths.items():
        if not os.access(p, os.X_OK):
            installed = shutil.which({"bench": "chorus-bench", "reduce": "reduce_bench",
                                      "chorusrun": "chorusrun"}[name])
            if installed is None:
                raise InputError("--measure: %s not found (use --build DIR)" % p)
            paths[name] = installed
    return paths


def reduce_rate(tools):
    out = _run([tools["reduce"]])
    best = 0.0
    for line in out.splitlines():
        m = re.search(r"^\S+\s+256 KiB\s+float32 sum\s+([\d.]+) GB/s", line)
        if m:
            best = max(best, float(m.group(1)))
    if best <= 0:
        raise RuntimeError("reduce_bench printed no 256 KiB float32 rate")
    return best * 1e9


def _bench_args(csv_path):
    return ["--op", "allreduce", "--algo", "ring", "--dtype", "float32", "--min-bytes", "4K",
            "--max-bytes", "16M", "--csv", "--out", csv_path, "--iters", "20", "--warmup", "2"]


def bench_intra(tools, tmp, shared):
    csv_path = os.path.join(tmp, "intra.csv")
    cmd = [tools["chorusrun"], "-np", "2", "--", tools["bench"]] + _bench_args(csv_path)
    if shared:
        cmd.append("--shared-buffers")
    _run(cmd)
    return csv_path


def bench_loopback(tools, tmp):
    csv_path = os.path.join(tmp, "inter.csv")
    env = dict(os.environ, CHORUS_TRANSPORT="tcp")
    _run([tools["chorusrun"], "-np", "2", "--", tools["bench"]] + _bench_args(csv_path), env=env)
    return csv_path


def bench_netns(tools, tmp, rate_text):
    """Two namespaces on a bridge, links shaped to `rate_text` both ways; ranks started by
    hand in each (torchrun-style variables), so no remote shell is needed."""
    rate_bps = inputs.rate("--netns-rate", rate_text) * 8
    if os.geteuid() != 0:
        raise InputError("--netns-rate needs root (network namespaces, tc)")
    tag = "cp%d" % (os.getpid() % 100000)
    net = "10.%d.%d" % (150 + os.getpid() % 50, os.getpid() // 50 % 250)
    burst = max(131072, int(rate_bps / 8 * 0.002))
    made = []

    def sh(*cmd):
        _run(list(cmd), timeout=30)

    try:
        sh("ip", "link", "add", tag + "br", "type", "bridge")
        made.append(("link", tag + "br"))
        sh("ip", "link", "set", tag + "br", "up")
        for k in (1, 2):
            ns, outer, inner = "%s_%d" % (tag, k), "%so%d" % (tag, k), "%si%d" % (tag, k)
            sh("ip", "netns", "add", ns)
            made.append(("netns", ns))
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
            made.append(("link", outer))
            sh("ip", "link", "set", outer, "master", tag + "br", "up")
            sh("ip", "-n", ns, "addr", "add", "%s.%d/24" % (net, k + 1), "dev", inner)
            sh("ip", "-n", ns, "link", "set", inner, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            for dev, where in ((outer, []), (inner, ["ip", "netns", "exec", ns])):
                sh(*(where + ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                              "%dbit" % rate_bps, "burst", str(burst), "latency", "50ms"]))
        csv_path = os.path.join(tmp, "inter.csv")
        secret = secrets.token_hex(16)
        procs = []
        for r in (0, 1):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK="0",
                       LOCAL_WORLD_SIZE="1", MASTER_ADDR="%s.2" % net, MASTER_PORT="29611",
                       CHORUS_TRANSPORT="tcp", CHORUS_SECRET=secret)
            cmd = ["ip", "netns", "exec", "%s_%d" % (tag, r + 1), tools["bench"]]
            cmd += _bench_args(csv_path if r == 0 else os.path.join(tmp, "inter1.csv"))
            _log("running " + " ".join(cmd))
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        for p in procs:
            out, _ = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError("chorus-bench in a namespace exited with %d: %s" %
                                   (p.returncode, out.strip()[-600:]))
        return csv_path
    finally:
        for kind, name in reversed(made):
            cmd = ["ip", "link", "del", name] if kind == "link" else ["ip", "netns", "del", name]
            subprocess.run(cmd, capture_output=True)


def one_worker(tools, program, batch, timeline_path=None):
    env = dict(os.environ, CHORUS_TIMELINE=timeline_path) if timeline_path else None
    out = _run([tools["chorusrun"], "-np", "1", "--"] + program, env=env, timeout=3600)
    rates = re.findall(r"([\d.]+) (?:samples|images)/s", out)
    if not rates:
        raise RuntimeError("the one-worker run printed no 'N samples/s' or 'N images/s' line")
    compute = batch / float(rates[-1])
    params = re.findall(r"(\d+) parameters", out)
    return compute, (int(params[-1]) * 4 if params else None)


def at_once(tools, program, batch, count, timelines=()):
    """Compute per step of each of `count` one-worker runs started together: what every
    worker of a full host gets when they all compute (the mean of their steps). Run i
    writes its timeline to timelines[i] when given."""
    cmd = [tools["chorusrun"], "-np", "1", "--"] + program
    _log("running %d at once: %s" % (count, " ".join(cmd)))
    if timelines and len(timelines) != count:
        raise ValueError("at_once: %d timelines for %d runs" % (len(timelines), count))
    envs = [dict(os.environ, CHORUS_TIMELINE=t) for t in timelines] or [None] * count
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env) for env in envs]
    steps = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        rates = re.findall(r"([\d.]+) (?:samples|images)/s", out)
        if p.returncode != 0 or not rates:
            raise RuntimeError("a run of %d at once failed: %s" % (count, out.strip()[-600:]))
        steps.append(batch / float(rates[-1]))
    return sum(steps) / len(steps)


def timeline(tools, program, tmp):
    path = os.path.join(tmp, "timeline.json")
    env = dict(os.environ, CHORUS_TIMELINE=path)
    _run([tools["chorusrun"], "-np", "2", "--"] + program, env=env, timeout=3600)
    return path


def fill(args):
    """Measures what was not given and stores it in `args` as if typed."""
    tools = _tools(args)
    tmp = tempfile.mkdtemp(prefix="chorus-plan.")
    _log("on %s; files in %s" % (_cpu_model(), tmp))
    if args.reduce_rate is None:
        args.reduce_rate = "%.0fB/s" % reduce_rate(tools)
        _log("reduction: %s" % args.reduce_rate)
    if args.bench_intra is None and args.intra_bandwidth is None:
        args.bench_intra = bench_intra(tools, tmp, shared=True)
    if args.bench_inter is None and args.inter_bandwidth is None:
        if args.netns_rate:
            args.bench_inter = bench_netns(tools, tmp, args.netns_rate)
        else:
            args.bench_inter = bench_loopback(tools, tmp)
    if args.cores_per_host is None:
        args.cores_per_host = str(len(os.sched_getaffinity(0)))
        _log("cores: %s" % args.cores_per_host)
    if args.program:
        batch = inputs.positive_int("--batch", args.batch)
        local = inputs.positive_int("--ranks-per-host", args.ranks_per_host)
        spread = [os.path.join(tmp, "steps-%d.json" % i) for i in range(local)]
        if args.compute is None or args.gradient_bytes is None:
            compute, grad = one_worker(tools, args.program, batch,
                                       spread[0] if local == 1 else None)
            if args.compute is None:
                args.compute = "%.9fs" % compute
                _log("compute: %.2f ms per step" % (compute * 1e3))
            if args.gradient_bytes is None and grad:
                args.gradient_bytes = str(grad)
        if args.host_compute is None and local > 1:
            args.host_compute = "%.9fs" % at_once(tools, args.program, batch, local, spread)
            _log("compute with %d workers at once: %s" % (local, args.host_compute))
        if args.step_timelines is None and all(os.path.exists(p) for p in spread):
            missing = inputs.why_no_step_spread(spread)
            if missing:
                _log("no spread of step times, lockstep left out: %s" % missing)
            else:
                args.step_timelines = ",".join(spread)
        if args.timeline is None and (args.tensors is None or args.overlap is None):
            args.timeline = timeline(tools, args.program, tmp)
    elif args.compute is None:
        raise InputError("--measure: give the training program after -- (or --compute)")
