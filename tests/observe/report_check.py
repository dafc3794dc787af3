#!/usr/bin/env python3
"""observe.report: `fibra report` of observe.event_log's log (a map with an agent SIGKILLed and a task
that raised), opened in headless Chromium. The page the browser built must hold a row per executor
that the log shows (counted here from the log), the killed agent named in the table of failed
attempts and in the lost workers, its script must have drawn a bar per attempt, it must load
nothing from the network, and it must weigh under 5 MB. A screenshot is kept beside it.

  report_check.py FIBRA LOG_DIR OUT_DIR
"""
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser


def fail(text):
    print(f"FAIL: {text}")
    sys.exit(1)


def chromium(profile_dir):
    """Debian's chromium and the flags a headless run here needs (a profile of its own in profile_dir)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        return None, []
    return browser, ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     "--user-data-dir=" + os.path.join(profile_dir, "chromium-profile")]


def page_dom(html, out):
    """The DOM headless Chromium built from the page `html` once its scripts ran: (url, its text)."""
    browser, flags = chromium(out)
    if not browser:
        fail("no chromium to open the report in: scripts/install-deps.sh installs Debian's chromium")
    url = "file://" + os.path.abspath(html)
    try:
        dom = subprocess.run([browser, *flags, "--virtual-time-budget=5000", "--dump-dom", url], capture_output=True,
                             text=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("chromium did not print the report's DOM within 120 s")
    if dom.returncode != 0 or "<body" not in dom.stdout:
        fail(f"chromium could not open the report (exit {dom.returncode}): {dom.stderr.strip()[-500:]}")
    return url, dom.stdout


def screenshot(url, out, name, height):
    """A screenshot of `url` (1400 pixels wide) as out/name; fails the test if none is written."""
    browser, flags = chromium(out)
    shot = os.path.join(out, name)
    try:
        subprocess.run([browser, *flags, "--virtual-time-budget=5000", f"--window-size=1400,{height}",
                        "--screenshot=" + shot, url], capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("chromium did not take the report's screenshot within 120 s")
    if not os.path.exists(shot) or os.path.getsize(shot) == 0:
        fail("chromium wrote no screenshot of the report")
    return shot


def from_log(path):
    """Executors (pool, worker, executor pid; 0 where none reported), attempts, and the lost agents' pids."""
    sent, requeued, exec_of, agent_pid, lost = {}, set(), {}, {}, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            e = json.loads(line)
            ev = e["ev"]
            if ev == "sent":
                sent[(e["pool"], e["chunk"], e["attempt"])] = e["worker"]
            elif ev == "requeued":
                requeued.add((e["pool"], e["chunk"], e["attempt"]))
            elif ev == "ran":
                exec_of[(e["pool"], e["chunk"], e["attempt"])] = e["exec"]
            elif ev == "worker":
                agent_pid[(e["pool"], e["worker"])] = e["pid"]
            elif ev == "lost":
                lost.append((e["pool"], e["worker"]))
    attempts = [k for k in sent if k not in requeued]
    executors = {(k[0], sent[k], exec_of.get(k, 0)) for k in attempts}
    return executors, len(attempts), [agent_pid[w] for w in lost]


class Page(HTMLParser):
    """The rows of the timeline, the text of each table's rows, <body>'s data-bars, outside references."""

    def __init__(self):
        super().__init__()
        self.rows = 0
        self.tables = {}
        self.table = None
        self.cell_text = None
        self.bars = None
        self.outside = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and "row" in (a.get("class") or "").split():
            self.rows += 1
        if tag == "body":
            self.bars = a.get("data-bars")
        if tag == "table":
            self.table = a.get("id")
            self.tables[self.table] = []
        if tag == "tr" and self.table:
            self.cell_text = []
        for k in ("src", "href"):
            if a.get(k):
                self.outside.append(f"<{tag} {k}={a[k]}>")
        if tag == "link":
            self.outside.append("<link>")

    def handle_endtag(self, tag):
        if tag == "tr" and self.table and self.cell_text is not None:
            self.tables[self.table].append(" ".join(self.cell_text))
            self.cell_text = None
        if tag == "table":
            self.table = None

    def handle_data(self, data):
        if self.cell_text is not None:
            self.cell_text.append(data.strip())


def main():
    fibra, log_dir, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    html = os.path.join(out, "report.html")
    r = subprocess.run([fibra, "report", log_dir, "-o", html], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"fibra report exited {r.returncode}: {r.stderr.strip()}")
    size = os.path.getsize(html)
    if size >= 5 << 20:
        fail(f"the report weighs {size} bytes, not under 5 MB")
    executors, attempts, lost_pids = from_log(os.path.join(log_dir, "events.jsonl"))
    if not lost_pids:
        fail("the log shows no lost worker (observe.event_log kills one)")

    url, dom = page_dom(html, out)
    page = Page()
    page.feed(dom)

    if page.rows != len(executors):
        fail(f"the timeline has {page.rows} rows; the log shows {len(executors)} executors")
    if page.bars != str(attempts):
        fail(f"the page's script drew {page.bars} bars; the log shows {attempts} attempts")
    failures = page.tables.get("failures", [])[1:]
    for pid in lost_pids:
        if not any(f"pid {pid}" in row and " lost " in f" {row} " for row in failures):
            fail(f"no failed attempt of kind lost names the killed agent (pid {pid}) in the table of failures")
        if not any(f"pid {pid}" in row for row in page.tables.get("losses", [])[1:]):
            fail(f"the table of lost workers does not name the killed agent (pid {pid})")
    if not any("boom 7" in row for row in failures):
        fail("the raised task's error is not in the table of failures")
    if page.outside:
        fail(f"the report loads from outside itself: {page.outside[:3]}")

    shot = screenshot(url, out, "report.png", 1600)
    print(f"PASS: the report ({size} bytes) shows {page.rows} executors, {page.bars} attempts drawn, "
          f"the killed agent in its failures; screenshot {shot}")


if __name__ == "__main__":
    main()
