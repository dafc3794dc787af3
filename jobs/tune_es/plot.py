#!/usr/bin/python3
"""Plots jobs/tune_es's curves: the best evaluation so far against wall time, one line per
scheduler (and seed), random search as the baseline.  Usage: plot.py <out dir>  (writes curves.png)"""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

out = sys.argv[1] if len(sys.argv) > 1 else "tune_es_out"
lines = {}
with open(f"{out}/curves.csv") as f:
    for row in csv.DictReader(f):
        lines.setdefault((row["scheduler"], row["seed"]), []).append((float(row["wall_time"]), float(row["best_eval"])))
colors = {"asha": "#d62728", "pbt": "#2ca02c", "random": "#7f7f7f"}
fig, ax = plt.subplots(figsize=(7, 4.2))
seen = set()
for (sched, seed), pts in sorted(lines.items()):
    xs, ys = zip(*pts)
    ax.step(xs, ys, where="post", color=colors.get(sched, "k"), alpha=0.8,
            label=sched if sched not in seen else None)
    seen.add(sched)
ax.axhline(475, color="k", linestyle="--", linewidth=1, label="solved (475)")
ax.set_xlabel("wall time of the search (s)")
ax.set_ylabel("best evaluation so far (mean of 5 episodes)")
ax.set_title("fibra::tune over ES on CartPole-v1")
ax.grid(True, alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(f"{out}/curves.png", dpi=120)
print(f"wrote {out}/curves.png")
