"""chorus-plan: the model's arithmetic against cases computed by hand (the working is in
each test's comment), the fit, the timeline, and bad input -> exit 2 with a message.

    python3 -m unittest -v tests/plan/plan_test.py      (CHORUS_PLAN=path/to/chorus-plan)
"""
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLAN = os.environ.get("CHORUS_PLAN", os.path.join(ROOT, "tools", "plan", "chorus-plan"))
sys.path.insert(0, os.path.join(ROOT, "tools", "plan"))

from chorus_plan import inputs, model  # noqa: E402

MB = 1e6
US, MS = 1e-6, 1e-3
# intra: 10 us, 1 GB/s; inter: 100 us, 100 MB/s; reduction 2 GB/s.
NET = model.Network(model.Level(10 * US, 1e9), model.Level(100 * US, 100e6), 1 / 2e9)


def world(n):
    return [list(range(n))]


class Arithmetic(unittest.TestCase):
    def near(self, got, want):
        self.assertAlmostEqual(got, want, delta=abs(want) * 1e-9 + 1e-15)

    def test_ring_one_host(self):
        # 4 ranks, 4 MB: 2(p-1) = 6 steps of 10 us + 1 MB / 1 GB/s = 6 x 1.01 ms;
        # reduction (p-1)/p n / 2 GB/s = 3 MB / 2 GB/s = 1.5 ms. 7.56 ms.
        c = model.ring(NET, model.Topology(1, 4), world(4), 4 * MB)
        self.near(c.total, 7.56 * MS)
        self.near(c.alpha, 60 * US)
        self.near(c.gamma, 1.5 * MS)

    def test_ring_across_hosts(self):
        # 2 hosts x 2: each step's slowest send crosses a host link, one stream per link:
        # 100 us + 1 MB / 100 MB/s = 10.1 ms, x 6 = 60.6 ms, + 1.5 ms reduction = 62.1 ms.
        c = model.allreduce("ring", NET, model.Topology(2, 2), 4 * MB)
        self.near(c.total, 62.1 * MS)

    def test_halving_doubling_across_hosts(self):
        # 2 x 2, 4 MB. mask 2 (across): 2 MB each way, both ranks of a host send out at once:
        # 100 us + 2 x 2 MB / 100 MB/s = 40.1 ms; mask 1 (within): 10 us + 1 MB / 1 GB/s =
        # 1.01 ms; each twice (halving, doubling): 82.22 ms; reduction 3/4 x 4 MB / 2 GB/s
        # = 1.5 ms. 83.72 ms: the ring (62.1) is faster here, as measured (docs/planner.md).
        c = model.allreduce("halving_doubling", NET, model.Topology(2, 2), 4 * MB)
        self.near(c.total, 83.72 * MS)

    def test_halving_doubling_three_ranks_folds(self):
        # 3 ranks on one host, 4 MB: fold 0 -> 1 and back 1 -> 0, each 10 us + 4 ms; the
        # odd rank reduces 4 MB (2 ms); then ranks 1, 2 exchange 2 MB twice (2 x 2.01 ms)
        # and reduce 2 MB (1 ms). 8.02 + 2 + 4.02 + 1 = 15.04 ms.
        c = model.halving_doubling(NET, model.Topology(1, 3), world(3), 4 * MB)
        self.near(c.total, 15.04 * MS)

    def test_recursive_doubling(self):
        # 4 ranks on one host, 4 KB: lg 4 = 2 exchanges of 4 KB: 2 x (10 us + 4 us) plus
        # 2 reductions of 4 KB (2 us each). 32 us.
        c = model.recursive_doubling(NET, model.Topology(1, 4), world(4), 4e3)
        self.near(c.total, 32 * US)

    def test_hierarchical(self):
        # 2 x 2, 4 MB. Within hosts, ring of 2: 2 x (10 us + 2 MB / 1 GB/s) = 4.02 ms, reduce
        # 2 MB = 1 ms. Across: each local rank's 2 MB slice, halving-doubling on 2 hosts
        # (<= 4 MiB), both slices share a host's link: 2 x (100 us + 2 x 1 MB / 100 MB/s) =
        # 40.2 ms, reduce 1 MB = 0.5 ms. 45.72 ms.
        c = model.allreduce("hierarchical", NET, model.Topology(2, 2), 4 * MB)
        self.near(c.total, 45.72 * MS)
        # The plan takes it from 1 MiB on uniform hosts.
        self.near(model.allreduce("auto", NET, model.Topology(2, 2), 4 * MB).total, 45.72 * MS)

    def test_auto_by_size(self):
        topo = model.Topology(1, 4)
        self.near(model.allreduce("auto", NET, topo, 4e3).total,
                  model.recursive_doubling(NET, topo, world(4), 4e3).total)
        self.near(model.allreduce("auto", NET, topo, 1e6).total,
                  model.halving_doubling(NET, topo, world(4), 1e6).total)
        self.near(model.allreduce("auto", NET, topo, 8e6).total,
                  model.ring(NET, topo, world(4), 8e6).total)
        self.near(model.allreduce("auto", NET, model.Topology(1, 3), 1e3).total,
                  model.ring(NET, model.Topology(1, 3), world(3), 1e3).total)

    def test_step_with_buckets_and_overlap(self):
        # 2 ranks on one host, 8 MB in 4 tensors, fusion 4 MB: 2 collectives of 4 MB, each
        # 2 x (10 us + 2 ms) + 2 MB reduced (1 ms) = 5.02 ms, plus its negotiation (4 bytes,
        # recursive doubling: 10 us + 4 ns + 2 ns): 5.030006 ms; comm 10.060012 ms.
        # compute 20 ms, overlap 0.25: 5 ms hidden -> step 25.060012 ms.
        job = model.Job(compute=20 * MS, batch=32, gradient_bytes=8 * MB, tensors=4,
                        overlap=0.25, fusion=4 * MB)
        p = model.predict("ring", job, NET, model.Topology(1, 2))
        self.near(p.comm.total, 10.060012 * MS)
        self.near(p.step, 25.060012 * MS)
        self.near(p.samples_per_s(job), 64 / (25.060012 * MS))
        self.near(p.efficiency(job), 20 / 25.060012)
        # Full overlap: the last collective is still exposed.
        p = model.predict("ring", model.Job(20 * MS, 32, 8 * MB, 4, 1.0, 4 * MB), NET,
                          model.Topology(1, 2))
        self.near(p.step, 25.030006 * MS)
        # Fusion off: one collective per tensor.
        self.assertEqual(model.buckets(model.Job(1, 1, 8 * MB, 4, 0, 0)), 4)
        self.assertEqual(model.buckets(model.Job(1, 1, 8 * MB, 4, 0, 1 * MB)), 4)
        self.assertEqual(model.buckets(model.Job(1, 1, 8 * MB, 4, 0, 64 * MB)), 1)

    def test_host_compute(self):
        # One worker 20 ms; 4 at once on a host 30 ms each. 2 on a host: 20 + 10 x 1/3.
        job = model.Job(20 * MS, 32, 8 * MB, 4, 0, 4 * MB, host_compute=30 * MS, host_ranks=4)
        self.near(job.compute_on(model.Topology(1, 1)), 20 * MS)
        self.near(job.compute_on(model.Topology(1, 2)), (20 + 10 / 3) * MS)
        self.near(job.compute_on(model.Topology(8, 4)), 30 * MS)
        # Efficiency stays against one worker alone: 4 ranks, 1 host, 8 MB / 4 MB fusion = 2
        # buckets of 4 MB: ring 6 x (10 us + 1 ms) + 1.5 ms reduced = 7.56 ms, negotiation
        # 2 x (10 us + 4 ns + 2 ns) = 20.012 us; step = 30 ms + 2 x 7.580012 ms.
        p = model.predict("ring", job, NET, model.Topology(1, 4))
        self.near(p.step, 30 * MS + 2 * 7.580012 * MS)
        self.near(p.efficiency(job), 20 * MS / p.step)

    def test_cores_limit_the_overlap(self):
        # The case of test_step_with_buckets_and_overlap (compute 20 ms, overlap 0.25, comm
        # 2 x 5.030006 ms) on hosts of 2 cores: 2 ranks leave none to spare, nothing is hidden:
        # step 30.060012 ms. 3 cores: 1 spare for 2 ranks, half the window (2.5 ms) hides.
        # 4 cores: the whole window, as without --cores-per-host.
        def step(cores):
            job = model.Job(20 * MS, 32, 8 * MB, 4, 0.25, 4 * MB, cores_per_host=cores)
            return model.predict("ring", job, NET, model.Topology(1, 2)).step
        self.near(step(2), 30.060012 * MS)
        self.near(step(3), 27.560012 * MS)
        self.near(step(4), 25.060012 * MS)
        self.near(step(0), 25.060012 * MS)

    def test_straggler(self):
        # Deviations -1, 0, +1 ms, each with probability 1/3. The maximum of 2 draws is +1
        # unless both are <= 0 (4/9): P(max = +1) = 5/9, P(max = 0) = 3/9, P(max = -1) = 1/9,
        # so E = 5/9 - 1/9 = 4/9 ms above the mean. Of 3 draws: 19/27 - 1/27 = 18/27 ms. Many
        # draws approach the largest deviation, never beyond it.
        job = model.Job(20 * MS, 32, 8 * MB, 4, 0.25, 4 * MB, step_spread=(-MS, 0.0, MS))
        self.near(job.straggler(1), 0.0)
        self.near(job.straggler(2), 4 / 9 * MS)
        self.near(job.straggler(3), 18 / 27 * MS)
        self.assertLessEqual(job.straggler(1024), MS)
        self.assertGreater(job.straggler(1024), 0.999 * MS)
        # Added to a synchronous step (test_step_with_buckets_and_overlap's 25.060012 ms) and
        # to a synchronous ps round (test_ps_sync's k = 4: 214.2 ms), not to async ps.
        self.near(model.predict("ring", job, NET, model.Topology(1, 2)).step,
                  (25.060012 + 4 / 9) * MS)
        # Of 4 draws: P(max = +1) = 1 - (2/3)^4 = 65/81, P(max = -1) = 1/81: 64/81 ms.
        self.near(job.straggler(4), 64 / 81 * MS)
        ps = dataclasses.replace(job, compute=50 * MS, ps_servers=4)
        self.near(model.predict("ps_sync", ps, NET, model.Topology(4, 1)).step,
                  (214.2 + 64 / 81) * MS)
        self.near(model.predict("ps_async", ps, NET, model.Topology(4, 1)).step, 210.2 * MS)

    def test_one_worker_has_no_communication(self):
        job = model.Job(20 * MS, 32, 8 * MB, 4, 0, 4 * MB)
        self.near(model.predict("ring", job, NET, model.Topology(1, 1)).step, 20 * MS)

    def test_ps_sync(self):
        # 4 workers on 4 hosts, D = 8 MB, k = 2, compute 50 ms. A worker's link: 8 MB /
        # 100 MB/s = 80 ms; a ps's: 4 x 8 / 2 MB = 16 MB = 160 ms. Two phases of 100 us +
        # 160 ms, the ps sums 16 MB (8 ms): 328.2 ms + 50 = 378.2 ms.
        job = model.Job(50 * MS, 1, 8 * MB, 10, 0, 4 * MB, ps_servers=2)
        p = model.predict("ps_sync", job, NET, model.Topology(4, 1))
        self.near(p.step, 378.2 * MS)
        self.assertEqual(p.why, "ps-link-bound")
        # k = n = 4: both links 80 ms: 2 x 80.1 + 4 (8 MB summed) + 50 = 214.2 ms.
        job = model.Job(50 * MS, 1, 8 * MB, 10, 0, 4 * MB, ps_servers=4)
        p = model.predict("ps_sync", job, NET, model.Topology(4, 1))
        self.near(p.step, 214.2 * MS)
        self.assertEqual(p.why, "worker-link-bound")

    def test_ps_async(self):
        # k = 1, 4 workers: the ps link carries 4 x 8 MB each way per cycle = 320 ms; a
        # worker alone needs 50 + 2 x (0.1 + 80) = 210.2 ms: the ps link sets the cycle.
        job = model.Job(50 * MS, 16, 8 * MB, 10, 0, 4 * MB, ps_servers=1)
        p = model.predict("ps_async", job, NET, model.Topology(4, 1))
        self.near(p.step, 320 * MS)
        self.assertEqual(p.why, "ps-link-bound")
        self.near(p.samples_per_s(job), 4 * 16 / 0.32)
        # k = 4: 80 ms per ps link; the worker's own 210.2 ms sets it.
        job = model.Job(50 * MS, 16, 8 * MB, 10, 0, 4 * MB, ps_servers=4)
        self.near(model.predict("ps_async", job, NET, model.Topology(4, 1)).step, 210.2 * MS)

    def test_fit_level(self):
        # t(n) = 2 alpha + n beta + n gamma / 2 with alpha 5 us, 2 GB/s, gamma 1 / 4 GB/s.
        gamma = 1 / 4e9
        pts = [(n, 10 * US + n / 2e9 + n * gamma / 2) for n in (4e3, 64e3, 1e6, 16e6)]
        lv = inputs.fit_level(pts, gamma, "test")
        self.assertAlmostEqual(lv.alpha, 5 * US, delta=1e-12)
        self.assertAlmostEqual(lv.bandwidth, 2e9, delta=1.0)

    def test_units(self):
        self.assertEqual(inputs.size("x", "4MiB"), 4 * 2**20)
        self.assertEqual(inputs.size("x", "11.08MB"), 11.08e6)
        self.assertEqual(inputs.rate("x", "1gbit"), 125e6)
        self.assertEqual(inputs.rate("x", "2GB/s"), 2e9)
        self.assertAlmostEqual(inputs.seconds("x", "30ms"), 0.03)
        self.assertEqual(model.topology_for(2, 4), model.Topology(1, 2))
        self.assertEqual(model.topology_for(8, 4), model.Topology(2, 4))

    def test_timeline(self):
        # Two steps, three tensors enqueued at 0, 2, 6 ms and 100, 101, 105 ms; one fused
        # allreduce per step. Windows 6 and 5 ms: median 5.5 ms over 20 ms compute = 0.275.
        ev = [{"name": "thread_name", "ph": "M", "args": {"name": "a"}}]
        for base, offs in ((0, (0, 2, 6)), (100, (0, 1, 5))):
            for t, off in zip("abc", offs):
                ev.append({"name": "NEGOTIATE", "ts": (base + off) * 1000, "dur": 10,
                           "args": {"tensor": t}})
                ev.append({"name": "ALLREDUCE", "ts": (base + 7) * 1000, "dur": 500,
                           "args": {"tensor": t}})
        ev.append({"name": "NEGOTIATE", "ts": 0, "dur": 1, "args": {"tensor": "metric/x"}})
        f = inputs.timeline_facts(ev, 0.02)
        self.assertEqual(f["tensors"], 3)
        self.assertEqual(f["collectives_per_step"], 1)
        self.assertAlmostEqual(f["overlap"], 0.275)


def one_worker_timeline(step_ms):
    """A one-worker timeline: per step, tensors a and b negotiated 0 and 3 ms after its start;
    a broadcast once at the start."""
    ev = [{"name": "NEGOTIATE", "ts": 0, "dur": 1, "args": {"tensor": "bcast/w"}}]
    at = 0.0
    for d in step_ms:
        for t, off in (("a", 0), ("b", 3)):
            ev.append({"name": "NEGOTIATE", "ts": (at + off) * 1000, "dur": 5,
                       "args": {"tensor": t}})
        at += d
    return ev


class StepTimes(unittest.TestCase):
    def test_gaps_without_warm_up(self):
        # 21 step starts give 20 gaps: the first two (a tenth) are warm-up and left out.
        steps = [50, 40] + [20, 22] * 9 + [0]
        gaps = inputs.step_times(one_worker_timeline(steps))
        self.assertEqual(len(gaps), 18)
        self.assertAlmostEqual(sum(gaps), 9 * 42e-3)
        self.assertAlmostEqual(max(gaps), 22e-3)

    def test_spread_is_pooled_around_each_runs_mean(self):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for i, (x, y) in enumerate(((20, 22), (30, 36))):
                paths.append(os.path.join(tmp, "t%d.json" % i))
                with open(paths[-1], "w") as f:
                    json.dump(one_worker_timeline([x, y] * 10 + [0]), f)
            spread = inputs.step_spread(paths)
        # Means 21 and 33 ms: deviations -1, +1 (9 each after warm-up) and -3, +3.
        self.assertEqual(len(spread), 36)
        self.assertAlmostEqual(spread[0], -3e-3)
        self.assertAlmostEqual(spread[-1], 3e-3)
        self.assertAlmostEqual(sum(spread), 0.0)

    def test_too_few_steps(self):
        with self.assertRaisesRegex(inputs.InputError, "at least 10 are needed"):
            inputs.step_times(one_worker_timeline([20] * 8 + [0]), "t.json")
        with self.assertRaisesRegex(inputs.InputError, "no tensor was negotiated in two steps"):
            inputs.step_times([], "t.json")

    def test_why_no_step_spread(self):
        self.assertEqual(inputs.why_no_step_spread([]), "no timelines")
        with tempfile.TemporaryDirectory() as tmp:
            empty, good = os.path.join(tmp, "empty.json"), os.path.join(tmp, "good.json")
            with open(empty, "w") as f:
                json.dump([{"name": "NEGOTIATE", "ts": 0, "args": {"tensor": "shutdown"}}], f)
            with open(good, "w") as f:
                json.dump(one_worker_timeline([20, 22] * 10 + [0]), f)
            self.assertIn("no tensor was negotiated in two steps",
                          inputs.why_no_step_spread([empty]))
            self.assertEqual(inputs.why_no_step_spread([good]), "")


GOOD = ["--compute", "30ms", "--batch", "64", "--gradient-bytes", "11.08MB", "--tensors", "6",
        "--intra-alpha", "2us", "--intra-bandwidth", "8GB/s", "--inter-alpha", "60us",
        "--inter-bandwidth", "1gbit", "--reduce-rate", "5GB/s"]


def plan(*args):
    return subprocess.run([sys.executable, PLAN] + list(args), capture_output=True, text=True,
                          timeout=120)


class CommandLine(unittest.TestCase):
    def bad(self, args, message):
        r = plan(*args)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(message, r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_table_winners_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "p.json")
            r = plan(*GOOD, "--ranks-per-host", "2", "--workers", "6", "--json", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("| 1024 | 512 x 2 |", r.stdout)
            self.assertIn("| 6 | 3 x 2 |", r.stdout)
            self.assertIn(" wins at ", r.stdout)
            with open(out) as f:
                preds = json.load(f)["predictions"]
        # powers of two 2..1024 and 6: 11 sizes x (3 allreduces + 2 ps modes x 3 k) plans.
        self.assertEqual(len(preds), 11 * 9)
        ring2 = [p for p in preds if p["workers"] == 2 and p["plan"] == "ring"][0]
        self.assertEqual((ring2["hosts"], ring2["ranks_per_host"]), (1, 2))

    def test_plot(self):
        with tempfile.TemporaryDirectory() as tmp:
            png = os.path.join(tmp, "eff.png")
            r = plan(*GOOD, "--plot", png, "--max-workers", "16")
            if r.returncode == 1 and "gnuplot not found" in r.stderr:
                self.skipTest("no gnuplot")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_negative_bandwidth(self):
        self.bad(GOOD + ["--inter-bandwidth=-1GB/s"], "must be a positive bandwidth")

    def test_zero_workers(self):
        self.bad(GOOD + ["--workers", "0"], "--workers must be at least 1")
        self.bad(GOOD + ["--hosts", "0"], "--hosts must be at least 1")
        self.bad(GOOD + ["--ranks-per-host", "0"], "--ranks-per-host must be at least 1")

    def test_unknown_algorithm(self):
        self.bad(GOOD + ["--algo", "ring,tree"], "unknown algorithm 'tree'")

    def test_other_bad_input(self):
        self.bad(GOOD + ["--overlap", "1.5"], "--overlap must lie in [0, 1]")
        self.bad(GOOD + ["--compute", "10parsecs"], "unknown unit 'parsecs'")
        self.bad(GOOD + ["--ps", "0"], "--ps must be at least 1")
        self.bad(GOOD + ["--ranks-per-host", "4", "--workers", "6"], "do not fill hosts")
        self.bad(GOOD[2:], "--compute is required")
        self.bad(GOOD + ["--bench-inter", "/nonexistent.csv"], "/nonexistent.csv")
        self.bad(GOOD + ["--", "prog"], "only run with --measure")
        self.bad(GOOD + ["--gradient-bytes", "0"], "--gradient-bytes must be > 0")
        self.bad(["--compute", "1s"], "required")
        self.bad(GOOD + ["--cores-per-host", "0"], "--cores-per-host must be at least 1")
        self.bad(GOOD + ["--step-timelines", "/nonexistent.json"], "/nonexistent.json")


if __name__ == "__main__":
    unittest.main()
