#!/usr/bin/env python3
"""observe.dashboard: the live page of a run (FIBRA_DASHBOARD) answers only those who bring its token
and name its address. The driver (dashboard_run) maps 240 items in 120 chunks and waits; then:
a page without an event log is refused first, saying why; its token, address and log files are the owner's alone (0600); a POST is refused (405); a request without the token, with a wrong one, or with a
foreign Host header is refused (401, 401, 403); /metrics, parsed, counts the 120 chunks and 240 items
done and none failed, 2 workers alive, and a duration histogram of 120 runs; /status.json says it
runs; /report is the report's page; the shell page is served without the token.

Then the page in headless Chromium, with its token in the address: the status its script fetched
is on the page and the report in its frame; a screenshot is kept in OUT_DIR.

  dashboard_check.py DASHBOARD_RUN [OUT_DIR]
"""
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_check import chromium  # noqa: E402


def fail(text, proc=None):
    print(f"FAIL: {text}")
    if proc:
        proc.kill()
    sys.exit(1)


def get(url, token=None, host=None):
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if host is not None:
        req.add_header("Host", host)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def browser_check(url, token, out, proc):
    """The page in headless Chromium, given its token in the address (#token=...): its script must
    have fetched the status with it (the run's line in the page's <pre id="status">) and put the
    report in its frame; a screenshot is kept in OUT."""
    browser, flags = chromium(out)
    if not browser:
        fail("no chromium to open the live page in: scripts/install-deps.sh installs Debian's chromium", proc)
    os.makedirs(out, exist_ok=True)
    flags.append("--virtual-time-budget=5000")
    page = f"{url}#token={token}"
    try:
        dom = subprocess.run([browser, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("chromium did not print the live page's DOM within 120 s", proc)
    status = re.search(r'<pre id="status">(.*?)</pre>', dom.stdout, re.S)
    if not status or ", running:" not in status.group(1):
        fail(f"the live page in Chromium does not show the run's status: {(status.group(1) if status else dom.stdout)[:300]!r}",
             proc)
    if "srcdoc=" not in dom.stdout or token in dom.stdout.split("<body", 1)[-1].split("<script", 1)[0]:
        fail("the live page in Chromium has no report in its frame, or shows its token", proc)
    shot = os.path.join(out, "live-page.png")
    try:
        subprocess.run([browser, *flags, "--window-size=1300,1000", "--screenshot=" + shot, page],
                       capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("chromium did not take the live page's screenshot within 120 s", proc)
    if not os.path.exists(shot) or os.path.getsize(shot) == 0:
        fail("chromium wrote no screenshot of the live page", proc)


def main():
    prog = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="fibra-dashboard-")
    # Without an event log the page has nothing to show: refused at once, saying so.
    env = {k: v for k, v in os.environ.items() if k != "FIBRA_EVENTS"}
    r = subprocess.run([prog], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                       env=dict(env, FIBRA_DASHBOARD="127.0.0.1:0"))
    if r.returncode == 0 or "is made from the run's event log" not in r.stderr:
        fail(f"a live page without an event log was not refused as it should be: {r.returncode} {r.stderr[-400:]}")
    # Nor in a folder others may write (they could swap its address file, or watch its token).
    shared = tempfile.mkdtemp(prefix="fibra-dashboard-shared-")
    os.chmod(shared, 0o777)
    r = subprocess.run([prog], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                       env=dict(env, FIBRA_EVENTS=shared, FIBRA_DASHBOARD="127.0.0.1:0"))
    if r.returncode == 0 or "writable by you alone" not in r.stderr:
        fail(f"a live page in a folder others may write was not refused: {r.returncode} {r.stderr[-400:]}")
    folder = tempfile.mkdtemp(prefix="fibra-dashboard-")
    env = dict(os.environ, FIBRA_EVENTS=folder, FIBRA_DASHBOARD="127.0.0.1:0")
    proc = subprocess.Popen([prog], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    line = ""
    deadline = time.time() + 90
    while time.time() < deadline and not line.startswith("mapped"):
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            fail(f"the driver ended (status {proc.returncode}) before its map was done")
    if not line.startswith("mapped 240 items, sum 57360"):
        fail(f"the driver's map: {line.strip() or 'nothing within 90 s'}", proc)
    try:
        token_path = os.path.join(folder, "dashboard.token")
        for name in ("dashboard.token", "dashboard.url", "events.jsonl"):
            mode = stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)
            if mode != 0o600:
                fail(f"{name} has mode {oct(mode)}, not 0600", proc)
        token = open(token_path).read().strip()
        url = open(os.path.join(folder, "dashboard.url")).read().strip()
        if not re.fullmatch(r"http://127\.0\.0\.1:\d+/", url) or len(token) != 64:
            fail(f"dashboard.url {url!r} or a token of {len(token)} characters", proc)
        base = url.rstrip("/")
        host = base[len("http://"):]

        for what, args, want in [("no token", {}, 401), ("a wrong token", {"token": "0" * 64}, 401),
                                 ("a foreign Host", {"token": token, "host": "evil.example:80"}, 403),
                                 ("a foreign Host, no token", {"host": f"rebound.example:{host.split(':')[1]}"}, 403)]:
            code, _ = get(base + "/metrics", **args)
            if code != want:
                fail(f"/metrics with {what} answered {code}, not {want}", proc)
        # Only GET and HEAD, and no body read: a POST with a body is refused at once.
        req = urllib.request.Request(base + "/", data=b"x" * 100000, method="POST")
        req.add_header("Authorization", f"Bearer {token}")
        started = time.time()
        try:
            urllib.request.urlopen(req, timeout=20)
            fail("a POST was answered", proc)
        except urllib.error.HTTPError as e:
            if e.code != 405:
                fail(f"a POST answered {e.code}, not 405", proc)
        except (urllib.error.URLError, ConnectionError):
            pass  # refused before its body was read: the connection may close under the sender
        if time.time() - started > 10:
            fail("a POST took over 10 s to be refused", proc)
        code, shell = get(base + "/")
        if code != 200 or "dashboard.token" not in shell:
            fail(f"the shell page answered {code}", proc)

        # The log is written every 0.2 s: the last chunks reach the page within a second or so.
        want = {'fibra_chunks{state="done"}': 120, 'fibra_items{state="done"}': 240,
                'fibra_chunks{state="failed"}': 0, 'fibra_attempts_failed_total': 0,
                'fibra_workers{state="alive"}': 2, 'fibra_task_duration_seconds_count': 120,
                'fibra_task_duration_seconds_bucket{le="+Inf"}': 120}
        deadline = time.time() + 10
        while True:
            code, text = get(base + "/metrics", token=token, host=host)
            if code != 200:
                fail(f"/metrics with the token answered {code}: {text[:200]}", proc)
            got = {}
            for row in text.splitlines():
                if row and not row.startswith("#"):
                    name, value = row.rsplit(" ", 1)
                    got[name] = float(value)
            wrong = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
            if not wrong:
                break
            if time.time() > deadline:
                fail(f"/metrics counts {wrong}, not {want}", proc)
            time.sleep(0.2)
        for row in text.splitlines():
            if row.startswith("# TYPE") and row.split()[3] not in ("gauge", "counter", "histogram"):
                fail(f"a metric of an unknown type: {row}", proc)

        code, status = get(base + "/status.json", token=token)
        if code != 200 or not json.loads(status)["live"] or ", running:" not in json.loads(status)["status"]:
            fail(f"/status.json: {code} {status[:300]}", proc)
        code, report = get(base + "/report", token=token)
        if code != 200 or 'id="timeline"' not in report:
            fail(f"/report: {code}", proc)
        browser_check(url, token, out, proc)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("the driver did not end within 60 s of its stdin's close")
    print(f"PASS: {url} refused no token, a wrong one and foreign Hosts; /metrics counts 120 chunks and 240 items "
          f"done; status and report served; the page in Chromium shows them (screenshot in {out})")


if __name__ == "__main__":
    main()
