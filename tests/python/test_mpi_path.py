"""chorus.torch on the MPI data path (CHORUS_TRANSPORT=mpi) in real mpirun jobs: results,
process sets, init -> shutdown -> init, a program that never calls shutdown() (it must end
cleanly: MPI finalized on every rank), and a rank that raises (the job ends promptly).
Run by pytest directly; skipped without mpirun. PYTHON names the interpreter."""

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import chorus.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    # Through MPI, initialised by chorus at MPI_THREAD_FUNNELED: no MPI calls of our own.
    assert hvd.mpi_built() and hvd.mpi_enabled() and not hvd.mpi_threads_supported()
    total = hvd.allreduce(torch.full((1000,), float(r + 1)), op=hvd.Sum)
    assert total.eq(n * (n + 1) / 2).all(), total[:3]
    pair = hvd.add_process_set([0, n - 1])
    if r in (0, n - 1):
        mean = hvd.allreduce(torch.full((10,), float(r)), op=hvd.Average, process_set=pair)
        assert mean.eq((n - 1) / 2).all(), mean
        both = hvd.allreduce(torch.full((4,), float(r + 1)), op=hvd.Adasum, process_set=pair)
        assert both.eq((1 + n) / 2).all(), both  # parallel tensors: their average
    root = hvd.broadcast(torch.arange(5.0) * (r + 1), root_rank=1)
    assert root.eq(torch.arange(5.0) * 2).all(), root
    hvd.shutdown()
    hvd.init()
    total = hvd.allreduce(torch.ones(3), op=hvd.Sum)[0].item()
    # A file per rank: mpirun may splice the ranks' stdout mid-line.
    with open(f"{sys.argv[1]}/rank{r}", "w") as out:
        out.write(f"rank {r} ok {total}")
    if "--raise" in sys.argv and r == 1:
        raise RuntimeError("rank 1 gives up")
    # no shutdown(): the exit hook does it
""")


def mpirun(tmp_path, np, *args):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    cmd = ["mpirun", "--oversubscribe", "-np", str(np), "-x", "CHORUS_TRANSPORT=mpi",
           "-x", "PYTHONPATH", "-x", "CHORUS_TIMEOUT_SECONDS=60"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [os.environ.get("PYTHON", sys.executable), str(script), str(tmp_path), *args]
    env = {k: v for k, v in os.environ.items()
           if k not in ("CHORUS_RANK", "CHORUS_STORE_ADDR", "MASTER_ADDR", "MASTER_PORT")}
    start = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    return proc, time.time() - start


def test_collectives_process_sets_and_exit_without_shutdown(tmp_path):
    proc, _ = mpirun(tmp_path, 3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(3):
        assert (tmp_path / f"rank{r}").read_text() == f"rank {r} ok 3.0", proc.stdout
    # Every rank finalized MPI: mpirun would otherwise say the job exited "improperly".
    assert "improperly" not in proc.stdout + proc.stderr, proc.stderr


def test_a_rank_that_raises_ends_the_job_promptly(tmp_path):
    proc, seconds = mpirun(tmp_path, 3, "--raise")
    assert proc.returncode != 0
    assert "rank 1 gives up" in proc.stderr, proc.stderr
    assert seconds < 45, seconds
