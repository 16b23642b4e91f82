#!/usr/bin/env python3
"""chorus-plan against real runs on this machine (issue 27's bar: every prediction within
15% of the measured median). Stages, each writing into OUT, run one at a time:

  inputs   reduce_bench; chorus-bench 2 ranks on this host (alloc_shared buffers, as the
           torch layer's buckets; heap buffers, as the hierarchical allreduce's local
           steps); 2 ranks in two network namespaces per --rate (chorus-plan's own
           --measure code)
  psring   bench/ps_vs_ring/run.sh per --rate: ring and synchronous ps (k = 1, 2, n) on
           2, 3, 4 hosts of one rank
  hosts    bench/compare_hosts.sh at the last --rate: 2 hosts x 2 ranks, flat ring, flat
           auto (halving-doubling up to 4 MiB), hierarchical
  train    Fashion-MNIST and ResNet-18: two one-worker runs at once (--host-compute, and
           their timelines: --step-timelines), 1 and 2 workers, --repeat times interleaved,
           and one 2-worker run of each with CHORUS_TIMELINE (tensors and overlap)
  report   predictions by chorus-plan (--json) from the inputs, against the medians: a
           Markdown table (OUT/validation.md) and a plot (--png)

    sudo bench/planner/validate.py --out DIR [--build build] [--rates 500mbit,1gbit]
         [--stages inputs,psring,hosts,train,report] [--repeat 3] [--png FILE]

Python standard library; gnuplot for the plot; root for the namespaces.
"""
import argparse
import glob
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PLAN = os.path.join(ROOT, "tools", "plan", "chorus-plan")
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))
from chorus_plan import inputs, measure  # noqa: E402

FASHION_PARAMS = 2770634  # conv 320 + fc1 21632 x 128 + 128 + fc2 1290 (examples/fashion_mnist)
TENSORS = {"fashion": 6, "resnet": 62}  # parameters with gradients, without a timeline
# Rows that leave inputs out on purpose, to show what each adds; not part of the bar.
ABLATION = "ablation:"


def log(msg):
    print("validate.py: %s" % msg, file=sys.stderr, flush=True)


def run(cmd, env=None, **kw):
    log(" ".join(cmd))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit("validate.py: %s failed (%d): %s" % (cmd[0], r.returncode,
                                                              (r.stderr or r.stdout)[-800:]))
    return r.stdout


def tools(build):
    return {"bench": os.path.join(build, "bench", "chorus-bench"),
            "reduce": os.path.join(build, "bench", "reduce_bench"),
            "chorusrun": os.path.join(build, "tools", "chorusrun", "chorusrun")}


def stage_inputs(a):
    t = tools(a.build)
    with open(os.path.join(a.out, "reduce.txt"), "w") as f:
        f.write(run([t["reduce"]]))
    for name, shared in (("intra-shared", True), ("intra-heap", False)):
        path = measure.bench_intra(t, a.out, shared)
        os.replace(path, os.path.join(a.out, name + ".csv"))
    for rate in a.rates:
        path = measure.bench_netns(t, a.out, rate)
        os.replace(path, os.path.join(a.out, "inter-%s.csv" % rate))


def fresh(a, name):
    """Where a measuring stage writes must not hold an earlier run's results: run.sh keeps
    the runs it finds in its --out, and train.txt is appended to, so they would be mixed."""
    path = os.path.join(a.out, name)
    if os.path.exists(path):
        raise SystemExit("validate.py: %s holds an earlier run's results, which this stage "
                         "would mix with its own: give a new --out, or remove it" % path)
    return path


def stage_psring(a):
    for rate in a.rates:
        fresh(a, "psring-" + rate)
    for rate in a.rates:
        run([os.path.join(ROOT, "bench", "ps_vs_ring", "run.sh"), "--build", a.build, "--rate",
             rate, "--model-mb", str(a.model_mb), "--workers", "2 3 4", "--ps", "1 2 n",
             "--steps", "3", "--warmup", "1", "--max-load", "4", "--max-wait", "60",
             "--out", os.path.join(a.out, "psring-" + rate)])


def stage_hosts(a):
    fresh(a, "hosts")
    run([os.path.join(ROOT, "bench", "compare_hosts.sh"), "--build", a.build, "--rate",
         a.rates[-1], "--rounds", "1", "--only", "flat-ring,flat-auto,hierarchical",
         "--max-bytes", "32M", "--out", os.path.join(a.out, "hosts"), "--", "--iters", "20",
         "--warmup", "2"])


def train_cmd(a, which, n):
    ex = os.path.join(a.build, "examples")
    if which == "fashion":
        prog = [os.path.join(ex, "fashion_mnist", "fashion_mnist"), "--epochs", "1",
                "--max-steps", "200", "--warmup-steps", "20", "--skip-test"]
    else:
        prog = [os.path.join(ex, "resnet_synthetic"), "--steps", "12", "--warmup-steps", "2"]
    return [tools(a.build)["chorusrun"], "-np", str(n), "--"] + prog


def stage_train(a):
    t = tools(a.build)
    with open(fresh(a, "train.txt"), "w") as f:
        for r in range(a.repeat):
            for which in ("fashion", "resnet"):
                batch = 64 if which == "fashion" else 8
                # Two one-worker runs at once: each worker's compute when both compute
                # (chorus-plan --host-compute, as its --measure gets it).
                spread = [os.path.join(a.out, "steps-%s-%d-%d.json" % (which, r, i))
                          for i in range(2)]
                step = measure.at_once(t, train_cmd(a, which, 1)[4:], batch, 2, spread)
                f.write("SOLO %s 2 %.6f %s\n" % (which, batch / step, ",".join(spread)))
                for n in (1, 2):
                    out = run(train_cmd(a, which, n))
                    rate = re.findall(r"([\d.]+) (?:samples|images)/s", out)[-1]
                    f.write("TRAIN %s %d %s\n" % (which, n, rate))
                    for params in re.findall(r"(\d+) parameters", out)[-1:]:
                        f.write("PARAMS %s %s\n" % (which, params))
                    f.flush()
    for which in ("fashion", "resnet"):
        env = dict(os.environ, CHORUS_TIMELINE=os.path.join(a.out, "timeline-%s.json" % which))
        run(train_cmd(a, which, 2), env=env)


# --- report -----------------------------------------------------------------------------

def plan(args):
    return json.loads(run([sys.executable, PLAN, "--json", "-"] + args))["predictions"]


def reduce_rate(out):
    text = open(os.path.join(out, "reduce.txt")).read()
    return max(float(x) for x in re.findall(r"256 KiB\s+float32 sum\s+([\d.]+) GB/s", text))


def base_args(a, rate, intra):
    return ["--reduce-rate", "%gGB/s" % reduce_rate(a.out),
            "--bench-intra", os.path.join(a.out, intra + ".csv"),
            "--bench-inter", os.path.join(a.out, "inter-%s.csv" % rate)]


def rows_psring(a):
    spec = importlib.util.spec_from_file_location(
        "analyze", os.path.join(ROOT, "bench", "ps_vs_ring", "analyze.py"))
    analyze = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(analyze)
    rows = []
    for rate in a.rates:
        d = os.path.join(a.out, "psring-" + rate, "results.txt")
        if not os.path.exists(d):
            continue
        config, results, _, sys_lines = analyze.parse(d)
        got = analyze.summarize(config, results, sys_lines)
        preds = plan(base_args(a, rate, "intra-heap") + [
            "--compute", "1ns", "--gradient-bytes", config["model_bytes"], "--tensors", "1",
            "--fusion", "0", "--workers", "2,3,4", "--max-workers", "2", "--algo",
            "ring,ps_sync", "--ps", "1,2,n"])
        for g in got:
            k = g["k"]
            name = "ring" if g["method"] == "ring" else (
                "ps sync k=n" if k == g["n"] and k > 2 else "ps sync k=%d" % k)
            p = [x for x in preds if x["workers"] == g["n"] and x["plan"] == name]
            if not p and name == "ps sync k=2":
                p = [x for x in preds if x["workers"] == g["n"] and x["plan"] == "ps sync k=n"]
            rows.append(("%d hosts x 1, %s, %.0f MiB, %s" % (
                g["n"], rate, int(config["model_bytes"]) / 2**20, name), g["t"],
                p[0]["step_s"], "%d round(s) x %s steps" % (g["rounds"], config["steps"])))
    return rows


def rows_hosts(a):
    files = glob.glob(os.path.join(a.out, "hosts", "*.csv"))
    if not files:
        return []
    times = {}
    for path in files:
        for line in open(path):
            f = line.strip().split(",")
            if len(f) > 8 and f[1] == "allreduce":
                times.setdefault((f[0], int(f[4])), []).append(float(f[5]) * 1e-6)
    rows = []
    algo = {"flat-ring": "ring", "hierarchical": "hierarchical", "flat-auto": "halving_doubling"}
    for (label, size), ts in sorted(times.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if label == "flat-auto" and size > 4 * 2**20:
            continue  # the ring from there: the flat-ring rows
        p = plan(base_args(a, a.rates[-1], "intra-heap") + [
            "--compute", "1ns", "--gradient-bytes", str(size), "--tensors", "1", "--fusion",
            "0", "--ranks-per-host", "2", "--workers", "4", "--max-workers", "2",
            "--algo", algo[label]])
        p = [x for x in p if x["workers"] == 4][0]
        rows.append(("2 hosts x 2, %s, %g MiB, %s" % (a.rates[-1], size / 2**20, label),
                     statistics.median(ts), p["step_s"], "chorus-bench median of 20"))
    return rows


def rows_train(a):
    path = os.path.join(a.out, "train.txt")
    if not os.path.exists(path):
        return []
    rates, params, spreads = {}, {"fashion": FASHION_PARAMS}, {}
    for line in open(path):
        w = line.split()
        if w and w[0] == "TRAIN":
            rates.setdefault((w[1], int(w[2])), []).append(float(w[3]))
        elif w and w[0] == "SOLO":
            rates.setdefault((w[1], "solo"), []).append(float(w[3]))
            if len(w) > 4:  # the runs' timelines
                spreads.setdefault(w[1], []).extend(w[4].split(","))
        elif w and w[0] == "PARAMS":
            params[w[1]] = int(w[2])
    rows = []
    for which, batch in (("fashion", 64), ("resnet", 8)):
        if (which, 1) not in rates:
            continue
        step1 = [batch / r for r in rates[(which, 1)]]
        compute = statistics.median(step1)
        grad = ["--gradient-bytes", str(params[which] * 4)]  # float32 gradients
        tl = os.path.join(a.out, "timeline-%s.json" % which)
        extra = ["--timeline", tl] if os.path.exists(tl) else ["--tensors", str(TENSORS[which])]
        args = base_args(a, a.rates[0], "intra-shared") + grad + extra + [
            "--compute", "%.9f" % compute, "--batch", str(batch), "--ranks-per-host", "2",
            "--max-workers", "2", "--algo", "auto"]
        preds = plan(args)
        name = "Fashion-MNIST" if which == "fashion" else "ResNet-18"
        rows.append(("%s, 1 worker" % name, compute, compute,
                     "%d runs; the prediction is the 1-worker median itself" % len(step1)))
        if (which, 2) not in rates:
            continue
        step2 = statistics.median(2 * batch / r for r in rates[(which, 2)])
        p = [x for x in preds if x["workers"] == 2][0]
        rows.append(("%s, 2 workers, %s the 1-worker compute only" % (name, ABLATION), step2,
                     p["step_s"], "%d runs" % len(rates[(which, 2)])))
        if (which, "solo") in rates:
            host = statistics.median(batch / r for r in rates[(which, "solo")])
            p = [x for x in plan(args + ["--host-compute", "%.9f" % host])
                 if x["workers"] == 2][0]
            rows.append(("%s, 2 workers, %s --host-compute only (2 one-worker runs at "
                         "once: %s)" % (name, ABLATION, fmt(host)), step2, p["step_s"],
                         "%d runs" % len(rates[(which, 2)])))
            # Every input --measure gathers: also the cores (none to spare for collectives)
            # and, where the one-worker timelines show steps, the spread of their step
            # times (lockstep's wait for the slower worker).
            cores = len(os.sched_getaffinity(0))
            full = args + ["--host-compute", "%.9f" % host, "--cores-per-host", str(cores)]
            label = "--host-compute and --cores-per-host %d (no step times: Trainer.fit " \
                    "does no collectives on one worker)" % cores
            missing = inputs.why_no_step_spread(spreads.get(which, []))
            if missing:
                log("no step times: %s" % missing)
            else:
                full += ["--step-timelines", ",".join(spreads[which])]
                label = "--host-compute, --cores-per-host %d and --step-timelines" % cores
            p = [x for x in plan(full) if x["workers"] == 2][0]
            rows.append(("%s, 2 workers, with %s" % (name, label), step2, p["step_s"],
                         "%d runs" % len(rates[(which, 2)])))
    return rows


def report(a):
    rows = rows_psring(a) + rows_hosts(a) + rows_train(a)
    lines = ["| configuration | measured median | predicted | predicted / measured | within 15% | runs |",
             "|---|---:|---:|---:|---|---|"]
    for name, got, pred, note in rows:
        ratio = pred / got
        lines.append("| %s | %s | %s | %.2f | %s | %s |" % (
            name, fmt(got), fmt(pred), ratio, "yes" if abs(ratio - 1) <= 0.15 else "**no**", note))
    bar = [r for r in rows if ABLATION not in r[0]]
    lines.append("")
    lines.append("%d configurations with every input (and %d ablations); largest deviation "
                 "%.1f%%; %d outside 15%%." % (
                     len(bar), len(rows) - len(bar),
                     100 * max((abs(r[2] / r[1] - 1) for r in bar), default=0),
                     sum(1 for r in bar if abs(r[2] / r[1] - 1) > 0.15)))
    text = "\n".join(lines)
    with open(os.path.join(a.out, "validation.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    draw(a, rows)


def fmt(s):
    return "%.1f ms" % (s * 1e3) if s < 10 else "%.2f s" % s


def draw(a, rows):
    png = a.png or os.path.join(a.out, "planner_validation.png")
    data = os.path.join(a.out, "validation.dat")
    groups = [("hosts x 1", "ring and sync ps, one rank per namespace host"),
              ("2 hosts x 2", "2 hosts x 2 ranks, one allreduce"),
              ("worker", "Fashion-MNIST and ResNet-18 training")]
    with open(data, "w") as f:
        for key, _ in groups:
            for name, got, pred, _ in rows:
                if key in name and ABLATION not in name:
                    f.write('%.6g %.6g\n' % (got, pred))
            f.write("\n\n")
    lo = min(min(r[1], r[2]) for r in rows) / 1.5
    hi = max(max(r[1], r[2]) for r in rows) * 1.5
    script = "\n".join([
        "set terminal pngcairo size 800,640", "set output '%s'" % png,
        "set title 'chorus-plan: predicted against measured step time (%s)'" % cpu(),
        "set logscale xy", "set xlabel 'measured median (s)'", "set ylabel 'predicted (s)'",
        "set xrange [%g:%g]" % (lo, hi), "set yrange [%g:%g]" % (lo, hi), "set grid",
        "set key top left",
        "plot x title 'predicted = measured' lc rgb 'black', 1.15*x title '+-15%' dt 2 lc rgb 'gray', "
        "0.85*x notitle dt 2 lc rgb 'gray', " + ", ".join(
            "'%s' index %d using 1:2 with points pt %d ps 1.3 title '%s'" % (data, i, 5 + 2 * i, t)
            for i, (_, t) in enumerate(groups)), ""])
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    log("plot: %s" % png)


def cpu():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    m = re.search(r"^Model name:\s*(.+)$", out, re.M)
    return m.group(1).strip() if m else "unknown CPU"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rates", default="500mbit,1gbit")
    p.add_argument("--stages", default="inputs,psring,hosts,train,report")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--model-mb", type=int, default=32)
    p.add_argument("--png")
    a = p.parse_args()
    a.rates = [r for r in a.rates.split(",") if r]
    os.makedirs(a.out, exist_ok=True)
    log("on %s" % cpu())
    stages = {"inputs": stage_inputs, "psring": stage_psring, "hosts": stage_hosts,
              "train": stage_train, "report": report}
    for s in a.stages.split(","):
        if s not in stages:
            raise SystemExit("validate.py: unknown stage %r" % s)
        stages[s](a)


if __name__ == "__main__":
    main()
