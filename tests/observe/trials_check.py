#!/usr/bin/env python3
"""tune.report: the event log of tune.run's experiment (three trials of Flaky, each failing once at
iteration 2 and run again from nothing), through `fibra report` opened in headless Chromium and
through `fibra status`. Counted here from the log itself: the page's script must draw a curve per
trial that reported, its table of trials must have a row per trial with its status, iterations and
best score, and `fibra status` must count the trials by status and name the best one.

  trials_check.py FIBRA LOG_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_check import Page, fail, page_dom, screenshot  # noqa: E402


class TrialsPage(Page):
    """Page's, and <body>'s data-curves, and the cells of each row of the first table of trials."""

    def __init__(self):
        super().__init__()
        self.curves = None
        self.trial_rows = []
        self.cells = None

    def handle_starttag(self, tag, attrs):
        super().handle_starttag(tag, attrs)
        if tag == "body":
            self.curves = dict(attrs).get("data-curves")
        if tag == "tr" and self.table == "trials-0":
            self.trial_rows.append([])
        if tag == "td" and self.table == "trials-0":
            self.cells = []

    def handle_endtag(self, tag):
        super().handle_endtag(tag)
        if tag == "td" and self.cells is not None:
            self.trial_rows[-1].append(" ".join(self.cells).strip())
            self.cells = None

    def handle_data(self, data):
        super().handle_data(data)
        if self.cells is not None:
            self.cells.append(data.strip())


def from_log(path):
    """The experiment's trainable and metric, and per trial: status, points (iteration -> score)."""
    tune, trials = None, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            if e["ev"] == "tune":
                tune = e
            elif e["ev"].startswith("trial_"):
                t = trials.setdefault(e["trial"], {"status": None, "points": {}})
                if e["ev"] == "trial_start":
                    t["points"] = {i: s for i, s in t["points"].items() if i <= e["iteration"]}
                elif e["ev"] == "trial_result":
                    t["points"][e["iteration"]] = e["metrics"][tune["metric"]]
                elif e["ev"] == "trial_end":
                    t["status"] = e["status"]
    if tune is None:
        fail(f"{path} has no tune event")
    return tune, trials


def main():
    fibra, log_dir, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    tune, trials = from_log(os.path.join(log_dir, "events.jsonl"))
    if len(trials) != tune["trials"]:
        fail(f"the log shows {len(trials)} trials; its tune event says {tune['trials']}")

    status = subprocess.run([fibra, "status", log_dir], capture_output=True, text=True, timeout=60)
    best_id = max(trials, key=lambda i: max(trials[i]["points"].values()))
    best = max(trials[best_id]["points"].values())
    want = (f"trials     '{tune['trainable']}': {len(trials)} of {tune['trials']} started: {len(trials)} done; "
            f"best {tune['metric']} {best:.6g} (trial {best_id}: ")
    if want not in status.stdout:
        fail(f"fibra status does not say\n  {want}...\nit printed:\n{status.stdout}{status.stderr}")

    html = os.path.join(out, "report.html")
    r = subprocess.run([fibra, "report", log_dir, "-o", html], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"fibra report exited {r.returncode}: {r.stderr.strip()}")
    url, dom = page_dom(html, out)
    page = TrialsPage()
    page.feed(dom)
    reported = sum(1 for t in trials.values() if t["points"])
    if page.curves != str(reported):
        fail(f"the page's script drew {page.curves} trial curves; the log shows {reported} trials with results")
    # Columns: trial, config, status, iterations, last, best, failures, last failure or why it stopped.
    rows = [r for r in page.trial_rows if r]  # (the header's row has no <td>)
    if len(rows) != len(trials):
        fail(f"the table of trials has {len(rows)} rows; the log shows {len(trials)} trials: {rows}")
    for i, t in trials.items():
        last_it = max(t["points"])
        want = [str(i), t["status"], str(last_it), f"{t['points'][last_it]:.6g}", f"{max(t['points'].values()):.6g}"]
        row = next((r for r in rows if r[0] == str(i)), None)
        if row is None or len(row) < 6 or [row[0], row[2], row[3], row[4], row[5]] != want:
            fail(f"trial {i}'s row is {row}; the log gives trial, status, iterations, last and best {want}")
    if page.outside:
        fail(f"the report loads from outside itself: {page.outside[:3]}")

    # `fibra trace`: valid by the format's own validator, an async slice per trial on the driver's
    # "tune trials" thread, and a counter of the best value that ends at the log's best.
    trace = os.path.join(out, "trace.json")
    r = subprocess.run([fibra, "trace", log_dir, "-o", trace], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"fibra trace exited {r.returncode}: {r.stderr.strip()}")
    validator = os.path.join(os.path.dirname(os.path.abspath(__file__)), "validate_trace.py")
    v = subprocess.run([sys.executable, validator, trace, "--min-attempts", "0"], capture_output=True, text=True,
                       timeout=60)
    if v.returncode != 0:
        fail(f"the trace is not valid: {v.stdout.strip()} {v.stderr.strip()}")
    with open(trace, encoding="utf-8") as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    begun = sorted(e["name"] for e in events if e.get("cat") == "trial" and e["ph"] == "b")
    if begun != sorted(f"trial {i}" for i in trials):
        fail(f"the trace's trial slices are {begun}, not one per trial of the log ({sorted(trials)})")
    counter = [e["args"]["best"] for e in events if e["ph"] == "C" and e["name"].startswith(f"best {tune['metric']}")]
    if not counter or counter[-1] != best or counter != sorted(counter):
        fail(f"the trace's best-{tune['metric']} counter is {counter}, not rising to the log's best {best}")
    shot = screenshot(url, out, "report-trials.png", 1800)
    print(f"PASS: {len(trials)} trials: {page.curves} curves drawn, a row each, a slice each in the trace, "
          f"fibra status names the best "
          f"({tune['metric']} {best:.6g}, trial {best_id}); screenshot {shot}")


if __name__ == "__main__":
    main()
