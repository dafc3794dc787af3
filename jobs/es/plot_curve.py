#!/usr/bin/env python3
"""Draws a learning curve as a PNG, with Debian's matplotlib: the CSV that jobs/es writes (the
population's mean and best per generation), or the one jobs/ppo writes (the mean return of the
last episodes against environment steps).

    plot_curve.py es-cartpole.csv es-cartpole.png [--target 475] [--title CartPole-v1]
    plot_curve.py ppo-humanoid.csv ppo-humanoid.png --title Humanoid-v4
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("png")
    p.add_argument("--target", type=float)
    p.add_argument("--title", default="")
    a = p.parse_args()
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"plot_curve: {a.csv} has no generations")
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    if "env_steps" in rows[0]:  # jobs/ppo's
        ax.plot([int(r["env_steps"]) for r in rows], [float(r["mean_return"]) for r in rows],
                label="mean return, last episodes")
        x_label, target_label = "environment steps", "target"
        title = f"{a.title} (PPO on fibra, {float(rows[-1]['wall_s']):.0f} s)"
    else:  # jobs/es'
        gen = [int(r["generation"]) for r in rows]
        ax.plot(gen, [float(r["mean"]) for r in rows], label="population mean", marker="o", ms=3)
        ax.plot(gen, [float(r["best"]) for r in rows], label="best candidate", alpha=0.6)
        x_label, target_label = "generation", "solved"
        title = f"{a.title} (OpenAI-ES on fibra, {float(rows[-1]['wall_s']):.1f} s of training)"
    if a.target is not None:
        ax.axhline(a.target, color="grey", ls="--", lw=1, label=f"{target_label} ({a.target:g})")
    ax.set_xlabel(x_label)
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.png)


if __name__ == "__main__":
    main()
