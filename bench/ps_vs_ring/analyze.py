#!/usr/bin/env python3
"""Turns run.sh's results.txt into the table of docs/benchmarks.md and a gnuplot PNG.

    analyze.py OUT/results.txt [--out DIR] [--png FILE]

Writes DIR/table.md, DIR/ps_vs_ring.dat, DIR/ps_vs_ring.gp and the PNG (DIR/ps_vs_ring.png
unless --png names another file). Python standard library only; gnuplot when installed.

The models (D = model bytes, B = shaped link rate in bytes/s, n workers, k ps; the alpha and
gamma terms of ANCHORS' ring formula are left out: 2(n-1) latencies of ~0.1 ms and one
float add per byte are far below D/B = 1.07 s here):
  ring    t = 2(n-1)/n * D/B      (ANCHORS' ring: reduce-scatter + allgather, every link busy)
  ps      t = 2 * max(D/B, n*D/(k*B))
          A synchronous step is a push phase, then a pull phase (the pull waits for the
          round's version, so the two never overlap). In each phase a worker's link carries
          D (one direction) and a ps's link carries n*D/k (the same direction), so a phase
          takes the slower of the two. ANCHORS' max(D/B, nD/(kB)) counts one phase: it is
          the time when pushes and pulls overlap on the full-duplex links (asynchronous or
          pipelined training).
TCP/IP over a 1500-byte MTU carries 1448 payload bytes per 1514 bytes that tbf counts, so
t/t_model >= 1.046 even on a perfect link.
"""
import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys

WIRE_EFFICIENCY = 1448 / 1514


def parse(path):
    config, results, cpu, sys_lines = {}, [], [], {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            if words[0] == "CONFIG":
                config = fields
            elif words[0] == "RESULT":
                results.append(fields)
            elif words[0] == "CPU":
                cpu.append(fields)
            elif words[0] == "SYS":
                sys_lines[fields["run"]] = fields
    return config, results, cpu, sys_lines


def method_of(fields):
    return "ring" if fields["mode"] == "ring" else "ps k=%s" % fields["k"]


def model_seconds(method, n, k, d, b):
    if method == "ring":
        return 2 * (n - 1) / n * d / b
    return 2 * max(d / b, n * d / (k * b))


def summarize(config, results, sys_lines):
    """One row per (n, method): medians over rounds of each run's step time."""
    d = int(config["model_bytes"])
    b = float(config["rate_bps"]) / 8
    runs = collections.defaultdict(list)  # run -> worker RESULT lines
    procs = collections.defaultdict(list)  # run -> every process's CPU fraction of one core
    ours = collections.defaultdict(float)  # run -> CPU seconds of all its processes
    for r in results:
        wall = float(r["wall_s"])
        ours[r["run"]] += float(r["cpu_s"])
        if wall > 0:
            procs[r["run"]].append(float(r["cpu_s"]) / wall)
        if r.get("role") == "worker":
            runs[r["run"]].append(r)
    cells = collections.defaultdict(list)
    for run, workers in sorted(runs.items()):
        first = workers[0]
        n = int(first["n"])
        # A synchronous step ends when the slowest worker's does: the largest median.
        t = max(float(w["median_s"]) for w in workers)
        lo = min(float(w["min_s"]) for w in workers)
        hi = max(float(w["max_s"]) for w in workers)
        sys_run = sys_lines.get(run, {})
        busy = float(sys_run.get("busy_frac", "nan"))
        soft = float(sys_run.get("softirq_frac", "nan"))
        share = ours[run] / (float(sys_run.get("wall_s", "nan")) * int(config.get("cores", 1)))
        drops = sys_run.get("tbf_dropped", "?")
        cells[(n, method_of(first), int(first["k"]))].append(
            (t, lo, hi, busy, max(procs[run]), len(workers) == n, soft, share, drops))
    rows = []
    for (n, method, k), got in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][2])):
        t = statistics.median(g[0] for g in got)
        model = model_seconds(method, n, k, d, b)
        rows.append({
            "n": n, "method": method, "k": k, "t": t, "per_round": [g[0] for g in got],
            "min": min(g[1] for g in got), "max": max(g[2] for g in got),
            "model": model, "ratio": t / model,
            "busbw": (2 * (n - 1) / n * d / t / b) if method == "ring" else None,
            "busy": [g[3] for g in got], "proc": [g[4] for g in got],
            "soft": [g[6] for g in got], "ours": [g[7] for g in got],
            "rounds": len(got), "complete": all(g[5] for g in got),
            "drops": [g[8] for g in got],
        })
    return rows


def percent_range(values):
    lo, hi = 100 * min(values), 100 * max(values)
    return "%.0f%%" % lo if round(lo) == round(hi) else "%.0f-%.0f%%" % (lo, hi)


def table(rows, config):
    b_mbit = float(config["rate_bps"]) / 1e6
    lines = [
        "| n | method | t_step (s) | per round (s) | steps min-max (s) | t_model (s) | t/t_model |"
        " busbw/B | tbf drops | CPU: machine busy | CPU: softirq | CPU: ours |"
        " CPU: busiest process |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        busbw = "%.2f" % r["busbw"] if r["busbw"] is not None else "-"
        note = "" if r["complete"] else " (not every worker reported)"
        lines.append("| %d | %s | %.2f | %s | %.2f-%.2f | %.2f | %.2f | %s | %s | %s | %s | %s | %s |%s" % (
            r["n"], r["method"], r["t"], " / ".join("%.2f" % x for x in r["per_round"]),
            r["min"], r["max"], r["model"], r["ratio"], busbw, " / ".join(r["drops"]),
            percent_range(r["busy"]),
            percent_range(r["soft"]), percent_range(r["ours"]), percent_range(r["proc"]), note))
    lines.append("")
    lines.append("t_step: a run's step time is the largest of its workers' medians; the column "
                 "is the median over rounds (per round: each round's value). "
                 "B = %g Mbit/s per direction per host, D = %.1f MB (%d bytes). t_model: ring "
                 "2(n-1)/n D/B; ps 2 max(D/B, nD/(kB)). busbw = 2(n-1)/n D / t. tbf drops: packets the "
                 "shaping queues dropped during the run (all links, per round). CPU (range over "
                 "rounds), machine busy: user+system+irq+softirq of all cores over the run, "
                 "whoever used it; softirq: the kernel's packet work alone; ours: CPU seconds of this run's "
                 "processes / (run wall time x cores); busiest process: its CPU seconds / its "
                 "wall seconds (100%% = one core)."
                 % (b_mbit, int(config["model_bytes"]) / 1e6, int(config["model_bytes"])))
    return "\n".join(lines) + "\n"


def series_of(row):
    """The plot's lines a row belongs to: its own method, and "ps k=n" when k = n > 1 (the
    k = 3 at n = 3 and k = 4 at n = 4 runs are one line, not two lone points)."""
    names = []
    if row["k"] == row["n"] and row["k"] > 1:
        names.append("ps k=n")
    if row["k"] <= 2 or row["k"] != row["n"]:
        names.append(row["method"])
    return names


def write_plot(rows, config, out_dir, png):
    by = {}
    for r in rows:
        for name in series_of(r):
            by[(r["n"], name)] = r
    methods = sorted({m for _, m in by}, key=lambda m: (m != "ring", m == "ps k=n", m))
    ns = sorted({r["n"] for r in rows})
    dat = os.path.join(out_dir, "ps_vs_ring.dat")
    with open(dat, "w") as f:
        f.write("# n " + " ".join("t[%s] model[%s]" % (m, m) for m in methods).replace(" k=", "_k")
                + "\n")
        for n in ns:
            cols = []
            for m in methods:
                r = by.get((n, m))
                cols += ["%.4f" % r["t"], "%.4f" % r["model"]] if r else ["NaN", "NaN"]
            f.write("%d %s\n" % (n, " ".join(cols)))
    plots = []
    for i, m in enumerate(methods):
        plots.append("'%s' using 1:%d with linespoints lw 2 pt 7 lc %d title '%s measured'"
                     % (dat, 2 + 2 * i, i + 1, m))
        plots.append("'%s' using 1:%d with lines dt 2 lc %d title '%s model'"
                     % (dat, 3 + 2 * i, i + 1, m))
    gp = os.path.join(out_dir, "ps_vs_ring.gp")
    with open(gp, "w") as f:
        f.write("set terminal pngcairo size 900,560 font 'sans,11'\n")
        f.write("set output '%s'\n" % png)
        f.write("set title 'Synchronous step, %.0f MiB of float32: ring allreduce vs k parameter "
                "servers, every host link %g Mbit/s each way'\n"
                % (int(config["model_bytes"]) / 2**20, float(config["rate_bps"]) / 1e6))
        f.write("set xlabel 'workers n'\nset ylabel 't_{step} (s)'\n")
        f.write("set xtics 1\nset xrange [%g:%g]\nset yrange [0:*]\nset key top left\nset grid\n"
                % (min(ns) - 0.2, max(ns) + 0.2))
        f.write("plot " + ", \\\n     ".join(plots) + "\n")
    if shutil.which("gnuplot") is None:
        print("analyze.py: gnuplot not installed, %s not drawn" % png, file=sys.stderr)
        return
    subprocess.run(["gnuplot", gp], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--out", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args()
    out_dir = args.out or os.path.dirname(os.path.abspath(args.results))
    config, results, _, sys_lines = parse(args.results)
    rows = summarize(config, results, sys_lines)
    if not rows:
        sys.exit("analyze.py: no worker RESULT lines in %s" % args.results)
    text = table(rows, config)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(text)
    print(text, end="")
    write_plot(rows, config, out_dir, args.png or os.path.join(out_dir, "ps_vs_ring.png"))


if __name__ == "__main__":
    main()
