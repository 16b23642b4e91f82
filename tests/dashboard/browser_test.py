#!/usr/bin/python3
"""chorusrun --dashboard in a real browser, while a real 2-rank training runs.

Debian's chromium, headless, loads the page (its own script polls the launcher) and dumps
the DOM after a few seconds of the page's time (--dump-dom --virtual-time-budget), or takes
a screenshot. Checked: both ranks are listed with increasing step counts, the loss curve has
points, a SIGSTOPped rank shows as stalled within the stall period, a SIGKILLed one as dead;
the screenshot is not blank. Also over plain HTTP: a page bound beyond loopback answers 403
without the job secret as its token.

usage: browser_test.py CHORUSRUN FASHION_MNIST [SCREENSHOT_OUT]
Exit 77 (skipped) when chromium is not installed.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

STALL_SECONDS = 4
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(*args):
    print("browser_test:", *args, flush=True)


def fetch(url, timeout=5):
    with OPENER.open(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def status_of(url):
    try:
        return fetch(url)[0]
    except urllib.error.HTTPError as e:
        return e.code


def chromium(args, timeout=90):
    profile = tempfile.mkdtemp(prefix="chorus_chromium.")
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
           "--no-first-run", "--disable-extensions", "--disable-background-networking",
           "--user-data-dir=" + profile, "--no-proxy-server"] + args
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=timeout, check=False)
        return out.stdout.decode(errors="replace")
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def dom(url, budget_ms=3000):
    return chromium(["--virtual-time-budget=%d" % budget_ms, "--dump-dom", url])


def ranks_in(page):
    """{rank: (state, step)} from the rank table's data attributes."""
    rows = re.findall(r'<tr class="rank" data-rank="(\d+)" data-state="(\w+)" data-step="(-?\d+|-)"',
                      page)
    return {int(r): (s, int(st) if st not in ("-",) else -1) for r, s, st in rows}


def loss_points(page):
    m = re.search(r'data-chart="loss" data-points="(\d+)"', page)
    return int(m.group(1)) if m else 0


def wait_until(what, predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("timed out waiting for " + what)


def start_job(chorusrun, args, env=None):
    err = tempfile.NamedTemporaryFile(prefix="chorusrun_err.", delete=False)
    proc = subprocess.Popen([chorusrun] + args, stdout=subprocess.DEVNULL, stderr=err,
                            env=env, start_new_session=True)
    def url():
        with open(err.name) as f:
            m = re.search(r"dashboard at (http://\S+/)", f.read())
        return m.group(1) if m else None
    return proc, wait_until("the dashboard's address", url, 30), err.name


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def check_token(chorusrun):
    env = dict(os.environ, CHORUS_SECRET="test-secret-&-more")
    proc, url, _ = start_job(chorusrun, ["-np", "1", "--dashboard", "0.0.0.0:0", "/bin/sleep",
                                         "30"], env)
    try:
        port = re.search(r":(\d+)/", url).group(1)
        base = "http://127.0.0.1:%s/" % port
        assert status_of(base) == 403, "no token"
        assert status_of(base + "?token=wrong") == 403, "wrong token"
        assert status_of(base + "state.json?token=wrong") == 403
        token = urllib.parse.quote("test-secret-&-more", safe="")
        code, body = fetch(base + "?token=" + token)
        assert code == 200 and "carries the job secret" in body, body[:300]
        log("beyond loopback: 403 without or with a wrong token, 200 with the secret")
    finally:
        stop(proc)
    # Beyond loopback without a secret to use as the token: refused at the start.
    r = subprocess.run([chorusrun, "-np", "1", "--dashboard", "0.0.0.0:0", "/bin/true"],
                       stderr=subprocess.PIPE, env={k: v for k, v in os.environ.items()
                                                    if not k.startswith("CHORUS_SECRET")})
    assert r.returncode == 2 and b"needs the job secret" in r.stderr, r.stderr


def check_restarts(chorusrun):
    # Attempt 0's rank 1 fails; --max-restarts 1 starts the group again, which succeeds.
    script = ('if [ "$CHORUS_RESTART_COUNT" = 0 ] && [ "$CHORUS_RANK" = 1 ]; then exit 3; fi; '
              'sleep 1')
    proc, url, _ = start_job(chorusrun, ["-np", "2", "--max-restarts", "1", "--dashboard",
                                         "127.0.0.1:0", "--dashboard-linger", "30", "/bin/sh",
                                         "-c", script])
    try:
        state = wait_until("the job to end", lambda: (
            lambda s: s if s["job"].startswith("ended") else None)(
                json.loads(fetch(url + "state.json")[1])), 60)
        events = "\n".join(state["events"])
        assert state["restart"] == 1 and state["job"] == "ended: every rank exited 0", state
        assert "rank 1 on localhost" in events and "exit code 3" in events, events
        assert "restarting the job after" in events and "attempt 1 started" in events, events
        assert [r["state"] for r in state["ranks"]] == ["exited", "exited"], state
        log("restart: events", state["events"])
    finally:
        stop(proc)


def main():
    chorusrun, fashion = sys.argv[1], sys.argv[2]
    shot = sys.argv[3] if len(sys.argv) > 3 else os.path.join(tempfile.gettempdir(),
                                                              "chorus_dashboard.png")
    check_token(chorusrun)
    check_restarts(chorusrun)
    timeline = tempfile.mktemp(prefix="chorus_timeline.", suffix=".json")
    proc, url, err = start_job(chorusrun, [
        "-np", "2", "--dashboard", "127.0.0.1:0", "--dashboard-stall", str(STALL_SECONDS),
        "--dashboard-linger", "120", fashion, "--epochs", "20", "--skip-test"],
        dict(os.environ, CHORUS_TIMELINE=timeline))
    log("dashboard at", url)
    try:
        state = lambda: json.loads(fetch(url + "state.json")[1])
        wait_until("both ranks live", lambda: all(
            r["state"] == "live" and r["steps"] > 0 for r in state()["ranks"]), 120)
        time.sleep(2)  # rank 0's timeline file gets past its first buffered block
        events = json.loads(fetch(url + "timeline.json?seconds=5")[1])
        spans = [e for e in events if e.get("ph") == "X"]
        log("timeline of the last 5 s: %d events, %d spans over %.1f s" % (
            len(events), len(spans), (max(e["ts"] for e in spans) - min(e["ts"] for e in spans))
            / 1e6 if spans else 0))
        assert spans and all(max(e["ts"] for e in spans) - e["ts"] <= 5e6 for e in spans)
        first = ranks_in(dom(url))
        log("browser, first look:", first)
        time.sleep(2)
        page = dom(url)
        second = ranks_in(page)
        log("browser, second look:", second, "loss points:", loss_points(page))
        assert sorted(second) == [0, 1], second
        for r in (0, 1):
            assert first[r][0] == "live" and second[r][0] == "live", (first, second)
            assert second[r][1] > first[r][1] > 0, (first, second)
        assert loss_points(page) > 0, "the loss curve has no points"
        assert "<polyline" in page

        chromium(["--virtual-time-budget=3000", "--window-size=1400,1000",
                  "--screenshot=" + shot, url])
        from PIL import Image
        img = Image.open(shot).convert("RGB")
        colours = len(set(img.resize((280, 200)).getdata()))
        log("screenshot", shot, img.size, colours, "colours")
        assert img.size[0] >= 1000 and colours > 20, "the screenshot looks blank"

        pids = {r["rank"]: r["pid"] for r in state()["ranks"]}
        os.kill(pids[1], signal.SIGSTOP)
        t0 = time.time()
        stalled = wait_until("rank 1 stalled in the browser",
                             lambda: ranks_in(dom(url, 1500)).get(1, ("",))[0] == "stalled",
                             STALL_SECONDS + 20)
        log("SIGSTOPped rank 1 shown as stalled after %.1f s (stall period %d s)" %
            (time.time() - t0, STALL_SECONDS))
        assert time.time() - t0 <= STALL_SECONDS + 10
        os.kill(pids[1], signal.SIGKILL)
        wait_until("rank 1 dead in the browser",
                   lambda: ranks_in(dom(url, 1500)).get(1, ("",))[0] == "dead", 30)
        page = dom(url, 1500)
        log("after SIGKILL:", ranks_in(page))
        assert "SIGKILL" in page
        log("PASS")
    finally:
        stop(proc)
        if os.path.exists(timeline):
            os.unlink(timeline)
        with open(err) as f:
            tail = f.read()[-2000:]
        log("chorusrun's stderr (end):\n" + tail)


if __name__ == "__main__":
    CHROMIUM = shutil.which("chromium")
    if not CHROMIUM:
        print("browser_test: chromium is not installed (scripts/setup installs it); skipped")
        sys.exit(77)
    main()
