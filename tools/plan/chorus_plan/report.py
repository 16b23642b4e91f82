"""What chorus-plan prints and draws: the predictions table, who wins where and why, the
efficiency plot (gnuplot), and the same predictions as JSON for scripts."""
import json
import os
import shutil
import subprocess
import tempfile


def label(plan):
    """'ring', 'hierarchical', 'ps sync k=2', ..."""
    if plan.algorithm.startswith("ps_"):
        return "ps %s k=%s" % (plan.algorithm[3:], plan.k_label)
    return plan.algorithm.replace("_", "-")


def _ms(s):
    return "%.2f" % (s * 1e3) if s < 10 else "%.0f" % (s * 1e3)


def table(rows, plans, job):
    """rows: [(workers, topology, [prediction per plan])]. One line per worker count:
    each plan's step time and efficiency, then the winner, its samples/s and why."""
    head = "| workers | hosts x ranks |" + "".join(" %s ms (eff) |" % label(p) for p in plans)
    head += " best | samples/s | why |"
    lines = [head, "|---:|---:|" + "---:|" * len(plans) + "---|---:|---|"]
    for workers, topo, preds in rows:
        cells = "".join(" %s (%.0f%%) |" % (_ms(p.step), 100 * p.efficiency(job)) for p in preds)
        best = min(range(len(plans)), key=lambda i: preds[i].step)
        lines.append("| %d | %d x %d |%s %s | %.0f | %s |" % (
            workers, topo.hosts, topo.local, cells, label(plans[best]),
            preds[best].samples_per_s(job), why(preds[best], job)))
    return "\n".join(lines)


def why(pred, job):
    """The winner's reason, with the share of the step that is communication."""
    if pred.why == "no communication":
        return pred.why
    share = pred.exposed / pred.step if pred.step > 0 else 0
    return "%s; %.0f%% of the step waits for communication" % (pred.why, 100 * share)


def winners(rows, plans):
    """'ring wins at 2-16 workers, ...': runs of consecutive worker counts with one winner."""
    runs = []
    for workers, _, preds in rows:
        best = label(plans[min(range(len(plans)), key=lambda i: preds[i].step)])
        reason = preds[min(range(len(plans)), key=lambda i: preds[i].step)].why
        if runs and runs[-1][0] == best:
            runs[-1][2] = workers
            runs[-1][3].add(reason)
        else:
            runs.append([best, workers, workers, {reason}])
    out = []
    for name, lo, hi, reasons in runs:
        where = "%d workers" % lo if lo == hi else "%d-%d workers" % (lo, hi)
        out.append("%s wins at %s (%s)" % (name, where, ", ".join(sorted(reasons))))
    return out


def to_json(rows, plans, job, inputs):
    return json.dumps({
        "inputs": inputs,
        "predictions": [
            {"workers": w, "hosts": t.hosts, "ranks_per_host": t.local, "plan": label(p),
             "step_s": pr.step, "samples_per_s": pr.samples_per_s(job),
             "efficiency": pr.efficiency(job), "comm_s": pr.comm.total,
             "comm_alpha_s": pr.comm.alpha, "comm_beta_s": pr.comm.beta,
             "comm_gamma_s": pr.comm.gamma, "exposed_s": pr.exposed, "why": pr.why}
            for w, t, preds in rows for p, pr in zip(plans, preds)],
    }, indent=1)


def plot(path, rows, plans, job, title):
    """Efficiency against workers (log2 x axis), one line per plan; needs gnuplot."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        raise RuntimeError("gnuplot not found (apt-get install gnuplot-nox); the table above "
                           "stands, no plot was drawn")
    with tempfile.TemporaryDirectory(prefix="chorus-plan.") as tmp:
        data = os.path.join(tmp, "eff.dat")
        with open(data, "w") as f:
            for i, _ in enumerate(plans):
                for workers, _, preds in rows:
                    f.write("%d %.6f\n" % (workers, 100 * preds[i].efficiency(job)))
                f.write("\n\n")
        curves = ", ".join("'%s' index %d with linespoints title '%s'" % (data, i, label(p))
                           for i, p in enumerate(plans))
        script = "\n".join([
            "set terminal pngcairo size 900,560",
            "set output '%s'" % path.replace("'", "''"),
            "set title '%s' noenhanced" % title.replace("'", "''"),
            "set logscale x 2", "set xlabel 'workers'", "set ylabel 'scaling efficiency (%)'",
            "set yrange [0:105]", "set key outside right", "set grid",
            "plot " + curves, ""])
        run = subprocess.run([gnuplot], input=script, text=True, capture_output=True)
        if run.returncode != 0:
            raise RuntimeError("gnuplot failed: %s" % run.stderr.strip())
