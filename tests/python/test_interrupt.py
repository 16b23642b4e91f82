"""Ctrl-C: a Python rank blocked in a collective is interruptible, and chorusrun stops a
Python job cleanly. Real processes under the real launcher; run by pytest directly (it
starts chorusrun itself). CHORUSRUN names the launcher, PYTHON the interpreter."""

import os
import signal
import subprocess
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def job(tmp_path):
    env = dict(os.environ, PID_DIR=str(tmp_path), CHORUS_TIMEOUT_SECONDS="120")
    proc = subprocess.Popen([os.environ["CHORUSRUN"], "-np", "2", "--grace-seconds", "5",
                             os.environ.get("PYTHON", "/usr/bin/python3"),
                             os.path.join(HERE, "job", "blocked_rank.py")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while not all((tmp_path / str(r)).exists() for r in (0, 1)):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.time() < deadline, "the ranks did not start"
        time.sleep(0.05)
    time.sleep(0.2)  # the pid files are written; let rank 1 settle in its wait
    pids = [int((tmp_path / str(r)).read_text()) for r in (0, 1)]
    yield proc, pids
    if proc.poll() is None:
        proc.kill()
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def wait_gone(proc, pids, seconds):
    out, _ = proc.communicate(timeout=seconds)
    deadline = time.time() + 5
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids), "a rank outlived chorusrun"
    return out


def test_ctrl_c_to_chorusrun_stops_every_rank(job):
    proc, pids = job
    start = time.time()
    proc.send_signal(signal.SIGINT)
    out = wait_gone(proc, pids, 30)
    assert proc.returncode == 130, out
    assert "interrupted by SIGINT" in out, out
    assert time.time() - start < 15, out


def test_sigint_to_a_rank_waiting_in_a_collective_raises_there(job):
    proc, pids = job
    start = time.time()
    os.kill(pids[1], signal.SIGINT)  # what Ctrl-C does to a rank run outside chorusrun
    out = wait_gone(proc, pids, 30)
    assert "rank 1: KeyboardInterrupt while waiting in allreduce" in out, out
    assert "rank 1 on localhost" in out and proc.returncode != 0, out
    assert time.time() - start < 15, out
