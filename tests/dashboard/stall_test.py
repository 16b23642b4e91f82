#!/usr/bin/python3
"""The engine's stall warning on chorusrun --dashboard's page: rank 1 of stall_worker
submits its tensor 3 s late, rank 0's stall inspector (CHORUS_STALL_CHECK_SECONDS=1) warns,
and the page's events name the tensor and the missing rank.

usage: stall_test.py CHORUSRUN STALL_WORKER
"""
import json
import os
import sys

from browser_test import fetch, log, start_job, stop, wait_until


def main():
    chorusrun, worker = sys.argv[1], sys.argv[2]
    env = dict(os.environ, CHORUS_STALL_CHECK_SECONDS="1")
    proc, url, _ = start_job(chorusrun, ["-np", "2", "--dashboard", "127.0.0.1:0",
                                         "--dashboard-linger", "30", worker], env)
    try:
        state = wait_until("the job to end", lambda: (
            lambda s: s if s["job"].startswith("ended") else None)(
                json.loads(fetch(url + "state.json")[1])), 60)
        events = "\n".join(state["events"])
        log("events:\n" + events)
        assert state["job"] == "ended: every rank exited 0", state
        assert "stall warning from rank 0" in events, events
        assert "tensor 'grad/late' (allreduce)" in events and "missing ranks [1]" in events
        page = fetch(url + "fragment")[1]
        assert "tensor &#39;grad/late&#39;" in page and "missing ranks [1]" in page
        log("PASS")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
