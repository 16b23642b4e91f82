"""The inputs of chorus-plan: quantities with units, and what measurements they come from
(chorus-bench CSV files, a chorus engine timeline). Every mistake is an InputError whose
message names the input; the command line turns it into exit status 2.
"""
import csv
import json
import math
import re
import statistics

from . import model


class InputError(Exception):
    """Bad input: the message says which and why."""


_SIZE_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "ki": 2**10, "mi": 2**20, "gi": 2**30}
_RATE_UNITS = {"b/s": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "kib/s": 2**10, "mib/s": 2**20,
               "gib/s": 2**30, "bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
_TIME_UNITS = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_NUMBER = r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$"


def _quantity(name, text, units, default_unit):
    m = re.match(_NUMBER, str(text))
    if not m:
        raise InputError("%s: %r is not a number with a unit" % (name, text))
    unit = (m.group(2) or default_unit).lower()
    if unit not in units:
        raise InputError("%s: unknown unit %r in %r (use one of: %s)" %
                         (name, m.group(2), text, ", ".join(sorted(k for k in units if k))))
    value = float(m.group(1)) * units[unit]
    if not math.isfinite(value):
        raise InputError("%s: %r is not finite" % (name, text))
    return value


def size(name, text, allow_zero=False):
    """Bytes: 4194304, 4MiB, 11.08MB."""
    v = _quantity(name, text, _SIZE_UNITS, "b")
    if v < 0 or (v == 0 and not allow_zero):
        raise InputError("%s must be %s, got %r" % (name, ">= 0" if allow_zero else "> 0", text))
    return v


def rate(name, text):
    """Bytes per second: 125MB/s, 1gbit, 10GB/s (bits for *bit, bytes for */s)."""
    v = _quantity(name, text, _RATE_UNITS, "b/s")
    if v <= 0:
        raise InputError("%s must be a positive bandwidth, got %r" % (name, text))
    return v


def seconds(name, text, allow_zero=True):
    """Seconds: 0.03, 30ms, 12us."""
    v = _quantity(name, text, _TIME_UNITS, "s")
    if v < 0 or (v == 0 and not allow_zero):
        raise InputError("%s must be %s, got %r" % (name, ">= 0" if allow_zero else "> 0", text))
    return v


def positive_int(name, text, minimum=1):
    try:
        v = int(str(text), 10)
    except ValueError:
        raise InputError("%s: %r is not a whole number" % (name, text)) from None
    if v < minimum:
        raise InputError("%s must be at least %d, got %d" % (name, minimum, v))
    return v


def fraction(name, text):
    try:
        v = float(text)
    except ValueError:
        raise InputError("%s: %r is not a number" % (name, text)) from None
    if not 0 <= v <= 1:
        raise InputError("%s must lie in [0, 1], got %r" % (name, text))
    return v


def algorithms(text):
    names = [a.strip() for a in str(text).split(",") if a.strip()]
    if not names:
        raise InputError("--algo: no algorithm named")
    for a in names:
        if a not in model.ALGORITHMS:
            raise InputError("--algo: unknown algorithm %r (known: %s)" %
                             (a, ", ".join(model.ALGORITHMS)))
    return names


def worker_counts(text, maximum=1024):
    out = []
    for w in str(text).split(","):
        if w.strip():
            v = positive_int("--workers", w.strip())
            if v > maximum:
                raise InputError("--workers: %d is more than %d" % (v, maximum))
            out.append(v)
    if not out:
        raise InputError("--workers: no worker count named")
    return out


# --- chorus-bench: alpha and beta of a level ---------------------------------------------

def read_bench_csv(path):
    """(bytes, seconds) of every verified allreduce row of a `chorus-bench --csv` file
    (columns: label, op, dtype, ranks, bytes, time_us, algbw, busbw, check, iters)."""
    rows = []
    try:
        with open(path, newline="") as f:
            for rec in csv.reader(f):
                if len(rec) < 9 or rec[1] != "allreduce":
                    continue
                if rec[8] != "ok":
                    raise InputError("%s: a row did not verify (%s)" % (path, ",".join(rec)))
                rows.append((int(rec[3]), float(rec[4]), float(rec[5]) * 1e-6))
    except OSError as e:
        raise InputError("%s: %s" % (path, e.strerror)) from None
    except ValueError:
        raise InputError("%s: not a chorus-bench --csv file" % path) from None
    if not rows:
        raise InputError("%s: no allreduce rows (run chorus-bench --op allreduce --csv)" % path)
    if any(r[0] != 2 for r in rows):
        raise InputError("%s: measured with %d ranks; the fit needs 2" % (path, rows[0][0]))
    return [(b, t) for _, b, t in rows]


def fit_level(points, gamma, name, tail=4):
    """alpha and bandwidth of a level from 2-rank ring allreduce times. The model says
    t(n) = 2 alpha + n beta + n gamma / 2: the slope (beta + gamma / 2) is fitted by least
    squares on the `tail` largest sizes, where bytes dominate; 2 alpha is the median of
    t - slope n over the `tail` smallest, where latency does. (One fit over every size
    lets the many small sizes pull the slope: a shaper's burst lets small messages through
    faster than its rate.)"""
    points = sorted(points)
    if len(points) < 2 or points[0][0] == points[-1][0]:
        raise InputError("%s: at least two sizes are needed to fit alpha and beta" % name)
    big = points[-min(tail, len(points)):]
    mean_n = sum(n for n, _ in big) / len(big)
    mean_t = sum(t for _, t in big) / len(big)
    var = sum((n - mean_n) ** 2 for n, _ in big)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in big) / var if var > 0 else 0.0
    if len(big) == 1 or var == 0:
        slope = (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
    beta = slope - gamma / 2
    if beta <= 0:
        raise InputError("%s: the fitted time per byte (%.3g s/B) is not above the reduction's "
                         "share (%.3g s/B)" % (name, slope, gamma / 2))
    small = points[:min(tail, len(points))]
    intercept = statistics.median(t - slope * n for n, t in small)
    return model.Level(max(intercept, 0.0) / 2, 1.0 / beta)


# --- the engine's timeline: tensors, collectives and the overlap window ------------------

def read_timeline(path):
    """Events of a CHORUS_TIMELINE file (a JSON array; a crash may leave it unclosed)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError as e:
        raise InputError("%s: %s" % (path, e.strerror)) from None
    if text and not text.endswith("]"):
        text = text.rstrip(",") + "]"
    try:
        events = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError("%s: not a Chrome-trace JSON array (%s)" % (path, e.msg)) from None
    if not isinstance(events, list):
        raise InputError("%s: not a Chrome-trace JSON array" % path)
    return [e for e in events if isinstance(e, dict)]


def _gradient_starts(events):
    """tensor -> the start times (s) of its NEGOTIATE events, for the tensors negotiated in at
    least two steps and in at least half as many as the most (gradients are negotiated every
    step; metrics and broadcasts only now and then)."""
    starts = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("name") == "NEGOTIATE" and args.get("tensor") is not None and "ts" in e:
            starts.setdefault(args["tensor"], []).append(float(e["ts"]) * 1e-6)
    most = max((len(s) for s in starts.values()), default=0)
    return {t: s for t, s in starts.items() if len(s) >= 2 and 2 * len(s) >= most}


def step_times(events, path="timeline"):
    """One worker's step times from its timeline: the gaps between the starts of successive
    steps, a step starting when its first gradient reaches the engine. The first tenth of the
    steps (warm-up) is left out."""
    grads = _gradient_starts(events)
    if not grads:
        raise InputError("%s: no tensor was negotiated in two steps (a timeline of a "
                         "training run is needed)" % path)
    steps = min(len(s) for s in grads.values())
    firsts = [min(s[i] for s in grads.values()) for i in range(steps)]
    gaps = [b - a for a, b in zip(firsts, firsts[1:])]
    gaps = gaps[len(gaps) // 10:]
    if len(gaps) < 10:
        raise InputError("%s: %d steps after warm-up; at least 10 are needed for the spread of "
                         "step times" % (path, len(gaps)))
    return gaps


def step_spread(paths):
    """Each step's time minus its own run's mean, from the timelines of one-worker runs (as
    many at once as a host has ranks), pooled and sorted (model.Job.step_spread)."""
    spread = []
    for path in paths:
        gaps = step_times(read_timeline(path), path)
        mean = statistics.fmean(gaps)
        spread.extend(g - mean for g in gaps)
    return tuple(sorted(spread))


def why_no_step_spread(paths):
    """"" when step_spread(paths) has steps to give, else why not (no timelines, or
    timelines without steps: Trainer.fit does no collectives on one worker)."""
    if not paths:
        return "no timelines"
    try:
        step_spread(paths)
        return ""
    except InputError as e:
        return str(e)


def timeline_facts(events, compute, path="timeline"):
    """From the timeline of a multi-worker run: tensors per step, collectives per step, and
    the overlap: the median over steps of (last enqueue - first enqueue) / compute, where a
    tensor's enqueue is the start of its NEGOTIATE event (the engine gets a gradient as
    backward produces it; the span between the first and the last is the part of the step
    during which collectives can run)."""
    collectives = {(float(e["ts"]), float(e.get("dur", 0))) for e in events
                   if e.get("name") == "ALLREDUCE" and "ts" in e
                   and (e.get("args") or {}).get("tensor") is not None}
    grads = _gradient_starts(events)
    if not grads:
        raise InputError("%s: no tensor was negotiated in two steps (a timeline of a "
                         "multi-worker training is needed)" % path)
    steps = min(len(s) for s in grads.values())
    windows = []
    for i in range(steps):
        at = [s[i] for s in grads.values()]
        windows.append(max(at) - min(at))
    window = statistics.median(windows)
    return {
        "tensors": len(grads),
        "steps": steps,
        "collectives_per_step": len(collectives) / max(1, steps),
        "window": window,
        "overlap": min(1.0, window / compute) if compute > 0 else 0.0,
    }
