"""chorus-plan's command line: read the inputs (given, or measured with --measure), predict
every plan for 2..1024 workers and the user's own sizes, print, plot.

Exit status: 0 done, 2 bad input (the message names it), 1 a measurement failed.
"""
import argparse
import dataclasses
import math
import statistics
import sys

from . import inputs, model, report
from .inputs import InputError

USAGE_EPILOG = """\
Links are given per level (--intra-*: ranks of one host, --inter-*: a host's link to the
others) or fitted from `chorus-bench --op allreduce --algo ring --csv` files of 2 ranks
(--bench-intra, --bench-inter). Units: sizes 4MiB, 11.1MB, 1048576; bandwidths 125MB/s,
1gbit; times 30ms, 12us, 0.03 (seconds). docs/planner.md explains the model.

  chorus-plan --compute 31ms --batch 64 --gradient-bytes 11.08MB --tensors 6 \\
      --intra-alpha 2us --intra-bandwidth 8GB/s --inter-alpha 60us --inter-bandwidth 1gbit \\
      --reduce-rate 5GB/s --ranks-per-host 2 --plot eff.png
  chorus-plan --measure --batch 64 -- build/examples/fashion_mnist/fashion_mnist --epochs 1
"""


@dataclasses.dataclass(frozen=True)
class Plan:
    algorithm: str
    k: object = None  # ps servers: an int, or "n" (one per worker)

    @property
    def k_label(self):
        return str(self.k)

    def servers(self, workers):
        return workers if self.k == "n" else self.k


def parser():
    p = argparse.ArgumentParser(
        prog="chorus-plan", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Predicts step time, samples/s and scaling efficiency of a chorus "
                    "training for 2..1024 workers and each algorithm.",
        epilog=USAGE_EPILOG)
    a = p.add_argument
    a("--compute", help="seconds of one step on one worker (a one-worker run measures it)")
    a("--host-compute", help="seconds of one step of each worker while --ranks-per-host "
                             "workers compute at once on one host (as many one-worker runs "
                             "at once measure it); default: --compute (cores to spare)")
    a("--cores-per-host", help="cores of each host: with no core beyond one per rank, "
                               "collectives cannot overlap compute (default: cores to spare)")
    a("--step-timelines", metavar="JSON,...",
      help="CHORUS_TIMELINE files of one-worker runs (as many at once as --ranks-per-host): "
           "the spread of step times, which every synchronous step waits on (default: none)")
    a("--batch", default="1", help="samples per worker per step (for samples/s; default 1)")
    a("--gradient-bytes", help="bytes of gradients per step (parameters x 4 for float32)")
    a("--tensors", help="gradient tensors per step (the parameters with gradients)")
    a("--intra-alpha", help="latency of a message between ranks of one host")
    a("--intra-bandwidth", help="bandwidth of one stream between ranks of one host")
    a("--inter-alpha", help="latency of a message across hosts")
    a("--inter-bandwidth", help="bandwidth of a host's link (shared by its ranks' streams)")
    a("--bench-intra", metavar="CSV", help="fit the intra level from a 2-rank chorus-bench CSV")
    a("--bench-inter", metavar="CSV", help="fit the inter level from a 2-rank chorus-bench CSV")
    a("--reduce-rate", help="bytes per second one core reduces (reduce_bench's float32 sum)")
    a("--ranks-per-host", default="1", help="ranks on each host (default 1)")
    a("--hosts", help="your number of hosts: its size is added to the table")
    a("--workers", help="more worker counts to predict, comma-separated")
    a("--max-workers", default="1024", help="largest power of two in the table (default 1024)")
    a("--overlap", help="share of compute during which gradients' collectives can run (0..1; "
                        "default 0, or from --timeline)")
    a("--timeline", metavar="JSON", help="a CHORUS_TIMELINE of a multi-worker run: overlap and "
                                         "tensors from it")
    a("--fusion", default="4MiB", help="bytes per fused collective (CHORUS_FUSION_THRESHOLD or "
                                       "DistributedOptimizer bucket_bytes; 0: none; default 4MiB)")
    a("--algo", default="ring,halving_doubling,hierarchical,ps_sync,ps_async",
      help="comma-separated: %s" % ", ".join(model.ALGORITHMS))
    a("--ps", default="1,2,n", help="parameter-server counts k for the ps algorithms "
                                    "(comma-separated; n = one per worker; default 1,2,n)")
    a("--plot", metavar="PNG", help="draw efficiency against workers for each plan")
    a("--json", metavar="FILE", help="write every prediction as JSON ('-': stdout, no table)")
    a("--measure", action="store_true",
      help="measure the inputs on this machine first (chorus-bench, a one-worker run of the "
           "program after --); given inputs take precedence")
    a("--build", default=None, help="--measure: the build folder with chorus-bench and chorusrun")
    a("--netns-rate", help="--measure: also emulate two hosts in network namespaces with links "
                           "of this rate (root) and fit the inter level there")
    a("program", nargs=argparse.REMAINDER, help="-- the training program and its arguments")
    return p


def plans_of(args):
    plans = []
    ks = []
    for k in str(args.ps).split(","):
        k = k.strip()
        ks.append("n" if k == "n" else inputs.positive_int("--ps", k))
    for a in inputs.algorithms(args.algo):
        if a.startswith("ps_"):
            plans.extend(Plan(a, k) for k in ks)
        else:
            plans.append(Plan(a))
    return plans


def level(args, which, gamma):
    alpha = getattr(args, which + "_alpha")
    bw = getattr(args, which + "_bandwidth")
    bench = getattr(args, "bench_" + which)
    name = "--%s" % which
    if bench:
        fitted = inputs.fit_level(inputs.read_bench_csv(bench), gamma,
                                  "--bench-%s %s" % (which, bench))
        alpha_v = inputs.seconds(name + "-alpha", alpha) if alpha else fitted.alpha
        bw_v = inputs.rate(name + "-bandwidth", bw) if bw else fitted.bandwidth
        return model.Level(alpha_v, bw_v)
    if bw is None or alpha is None:
        raise InputError("%s level: give %s-alpha and %s-bandwidth, or --bench-%s CSV, or "
                         "--measure" % (which, name, name, which))
    return model.Level(inputs.seconds(name + "-alpha", alpha), inputs.rate(name + "-bandwidth", bw))


def required(args, name):
    v = getattr(args, name.replace("-", "_"))
    if v is None:
        raise InputError("--%s is required (or --measure)" % name)
    return v


def build_inputs(args, local):
    compute = inputs.seconds("--compute", required(args, "compute"), allow_zero=False)
    gamma = 1.0 / inputs.rate("--reduce-rate", required(args, "reduce-rate"))
    net = model.Network(level(args, "intra", gamma), level(args, "inter", gamma), gamma)
    overlap = 0.0
    tensors = args.tensors
    if args.timeline:
        facts = inputs.timeline_facts(inputs.read_timeline(args.timeline), compute, args.timeline)
        overlap = facts["overlap"]
        tensors = tensors or str(facts["tensors"])
    if args.overlap is not None:
        overlap = inputs.fraction("--overlap", args.overlap)
    if tensors is None:
        raise InputError("--tensors is required (or --timeline, or --measure)")
    job = model.Job(
        compute=compute, batch=inputs.positive_int("--batch", args.batch),
        gradient_bytes=inputs.size("--gradient-bytes", required(args, "gradient-bytes")),
        tensors=inputs.positive_int("--tensors", tensors), overlap=overlap,
        fusion=inputs.size("--fusion", args.fusion, allow_zero=True),
        host_compute=inputs.seconds("--host-compute", args.host_compute, allow_zero=False)
        if args.host_compute else 0.0, host_ranks=local,
        cores_per_host=inputs.positive_int("--cores-per-host", args.cores_per_host)
        if args.cores_per_host else 0,
        step_spread=inputs.step_spread(args.step_timelines.split(","))
        if args.step_timelines else ())
    return job, net


def worker_rows(args, local):
    """(workers, topology) for powers of two from 2 and the user's own sizes."""
    maximum = inputs.positive_int("--max-workers", args.max_workers, minimum=2)
    if maximum > 1024:
        raise InputError("--max-workers: at most 1024, got %d" % maximum)
    own = inputs.worker_counts(args.workers) if args.workers else []
    if args.hosts:
        own.append(inputs.positive_int("--hosts", args.hosts) * local)
    for w in own:
        if w > local and w % local:
            raise InputError("--workers: %d workers do not fill hosts of %d ranks "
                             "(--ranks-per-host)" % (w, local))
    counts = set(own)
    w = 2
    while w <= maximum:
        if w <= local or w % local == 0:
            counts.add(w)
        w *= 2
    return [(w, model.topology_for(w, local)) for w in sorted(counts)]


def predict_rows(rows, plans, job, net):
    out = []
    for workers, topo in rows:
        preds = []
        for p in plans:
            j = dataclasses.replace(job, ps_servers=p.servers(workers)) if p.k else job
            preds.append(model.predict(p.algorithm, j, net, topo))
        out.append((workers, topo, preds))
    return out


def describe(job, net, local):
    return ("inputs: compute %.2f ms/step, batch %d, gradients %.2f MB in %d tensors, fusion "
            "%s, overlap %.2f, %d ranks per host; intra alpha %.2f us, %.2f GB/s; inter alpha "
            "%.2f us, %.3f GB/s; reduction %.2f GB/s%s" % (
                job.compute * 1e3, job.batch, job.gradient_bytes / 1e6, job.tensors,
                "%.2f MB" % (job.fusion / 1e6) if job.fusion else "off", job.overlap, local,
                net.intra.alpha * 1e6, net.intra.bandwidth / 1e9, net.inter.alpha * 1e6,
                net.inter.bandwidth / 1e9, 1 / net.gamma / 1e9,
                "; %.2f ms/step with %d workers on a host" % (job.host_compute * 1e3, local)
                if job.host_compute else "")
            + ("; %d cores per host" % job.cores_per_host if job.cores_per_host else "")
            + ("; step times spread %.2f ms (standard deviation of %d steps)" % (
                math.sqrt(statistics.fmean(d * d for d in job.step_spread)) * 1e3,
                len(job.step_spread)) if job.step_spread else ""))


def run(argv):
    args = parser().parse_args(argv)
    if args.program and args.program[0] == "--":
        args.program = args.program[1:]
    if args.measure:
        from . import measure  # runs programs: only when asked
        measure.fill(args)
    elif args.program:
        raise InputError("a program after -- is only run with --measure")
    local = inputs.positive_int("--ranks-per-host", args.ranks_per_host)
    plans = plans_of(args)
    job, net = build_inputs(args, local)
    rows = predict_rows(worker_rows(args, local), plans, job, net)
    inputs_json = {"compute_s": job.compute, "host_compute_s": job.host_compute,
                   "batch": job.batch,
                   "gradient_bytes": job.gradient_bytes, "tensors": job.tensors,
                   "overlap": job.overlap, "fusion_bytes": job.fusion, "ranks_per_host": local,
                   "cores_per_host": job.cores_per_host, "step_spread_steps": len(job.step_spread),
                   "intra": dataclasses.asdict(net.intra), "inter": dataclasses.asdict(net.inter),
                   "gamma_s_per_byte": net.gamma}
    if args.json:
        text = report.to_json(rows, plans, job, inputs_json)
        if args.json == "-":
            print(text)
            return 0
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(describe(job, net, local))
    print()
    print(report.table(rows, plans, job))
    print()
    for line in report.winners(rows, plans):
        print(line)
    if args.plot:
        report.plot(args.plot, rows, plans, job,
                    "chorus-plan: %.1f ms compute, %.1f MB gradients, %d ranks/host" % (
                        job.compute * 1e3, job.gradient_bytes / 1e6, local))
        print("plot: %s" % args.plot)
    return 0


def main(argv=None):
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except InputError as e:
        print("chorus-plan: %s" % e, file=sys.stderr)
        return 2
    except ValueError as e:  # the model's own checks (e.g. workers that do not fill hosts)
        print("chorus-plan: %s" % e, file=sys.stderr)
        return 2
    except RuntimeError as e:  # a measurement or the plot failed
        print("chorus-plan: %s" % e, file=sys.stderr)
        return 1
