#!/usr/bin/python3
"""Plots the scale simulation's figures (b9_simulated's CSV output) against the number of agents.

    plot_simulated.py out.png run1.csv [run2.csv ...]

Each CSV is one run of build/benchmarks/b9_simulated (rows benchmark,metric,value,unit); runs with
--silent-every have metrics named silent_<k>_agents_<n>_... and are drawn as a second series.
Where several runs give a figure, the median is drawn."""
import csv
import re
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [("tasks_per_s", "tasks dispatched and answered per s"), ("roundtrip_us", "apply_async round trip (us)"),
          ("idle_driver_cpu_pct", "idle driver CPU (% of a core)")]


def read(paths):
    values = defaultdict(list)  # (series, metric, agents) -> values
    for path in paths:
        with open(path) as f:
            for row in csv.reader(line for line in f if not line.startswith("#")):
                if len(row) < 3 or row[0] != "b9_simulated":
                    continue
                m = re.fullmatch(r"(silent_\d+_)?agents_(\d+)_(\w+)", row[1])
                if m:
                    series = "1% silent" if m.group(1) else "all answering"
                    values[(series, m.group(3), int(m.group(2)))].append(float(row[2]))
    return values


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    values = read(sys.argv[2:])
    if not values:
        sys.exit("plot_simulated: no b9_simulated rows in " + ", ".join(sys.argv[2:]))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(14, 4))
    for ax, (metric, title) in zip(axes, PANELS):
        for series in ("all answering", "1% silent"):
            points = sorted((n, statistics.median(v)) for (s, m, n), v in values.items() if s == series and m == metric)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=series)
        ax.set_xscale("log")
        ax.set_xlabel("simulated agents (one worker each)")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("The driver against simulated agents (2 processes speak for them, 2 cores)", fontsize=11)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)
    print(f"wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
