#!/usr/bin/python3
"""B11, time to solve CartPole-v1 with PPO: fibra's job (build/jobs/ppo) against the same PPO written
in Python with torch and multiprocessing (benchmarks/peers/ppo_peer.py), seed by seed, alternating.

    benchmarks/b11_ppo.py [--seeds 1,2,3,4,5] [--workers 4] [--envs-per-worker 2] [--steps 32]
                          [--total-steps 200000] [--systems fibra,multiprocessing] [--build DIR] [--async]
                          [--rows]

Solved means what both programs check the same way: the mean return of the last 20 episodes
reaches 475, and then 100 greedy evaluation episodes average at least 475. Each program prints
`solved in S environment steps, W s` (W from the start of training, after its workers started) and
its start-up separately; this runner also takes each command's whole wall time. Both use rl-zoo's
CartPole-v1 PPO hyper-parameters (8 copies x 32 steps, 20 epochs of one minibatch of 256, lambda 0.8,
gamma 0.98, learning rate 0.001 and clip 0.2 annealed linearly over --total-steps) and normalise
observations (a running mean and variance shared by the workers); their generators differ, so a seed
names different episodes in each. A run that does not solve within --total-steps counts as
unsolved (its time is left out of the medians and the row says how many solved).

Builds nothing: it expects build/jobs/ppo. Prints a Markdown table; with --rows, the suite's rows
(benchmarks/README.md):

    b11,steps_to_solve,<median>,steps
    b11,seconds_to_solve,<median>,s           training, after start-up
    b11,command_seconds,<median>,s            the whole command, start-up included
    b11,solved_runs,<k>,runs                  of the seeds given

for the one system --systems names (the suite runs each system in turn).
Worker counts above the machine's cores are oversubscribed: the header says so. On SIGTERM, SIGINT
or SIGHUP the running program's process group is stopped first.
"""
import argparse
import datetime
import os
import re
import signal
import statistics
import sys
import tempfile

from job_runs import Stopped, on_signal, run_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
PEER = os.path.join(ROOT, "benchmarks", "peers", "ppo_peer.py")
SYSTEMS = ["fibra", "multiprocessing"]
SOLVED = re.compile(r"solved in (\d+) environment steps, ([0-9.]+) s")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--envs-per-worker", type=int, default=2)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--total-steps", type=int, default=200000)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--time-limit", type=float, default=600, help="seconds per run")
    p.add_argument("--async", dest="asynchronous", action="store_true",
                   help="fibra's asynchronous learner (jobs/ppo --async); the peer is synchronous PPO either way")
    p.add_argument("--rows", action="store_true")
    a = p.parse_args()
    a.seeds = [int(s) for s in a.seeds.split(",") if s]
    a.systems = [s for s in a.systems.split(",") if s]
    for s in a.systems:
        if s not in SYSTEMS:
            p.error(f"unknown system '{s}' (the systems are {', '.join(SYSTEMS)})")
    if a.rows and len(a.systems) != 1:
        p.error("--rows prints one system's figures: pass --systems fibra or --systems multiprocessing")
    a.ppo = os.path.join(os.path.abspath(a.build), "jobs", "ppo")
    if "fibra" in a.systems and not os.access(a.ppo, os.X_OK):
        p.error(f"{a.ppo} is not built: cmake --build build --target ppo (or pass --build DIR)")
    return a


def command(a, system, seed, tmp):
    if system == "fibra":
        return [a.ppo, "--env", "cartpole", "--workers", str(a.workers), "--envs-per-worker", str(a.envs_per_worker),
                "--steps", str(a.steps), "--total-steps", str(a.total_steps), "--seed", str(seed),
                "--csv", os.path.join(tmp, "ppo.csv")] + (["--async"] if a.asynchronous else [])
    return [PY, PEER, "--workers", str(a.workers), "--n-envs", str(a.workers * a.envs_per_worker),
            "--n-steps", str(a.steps), "--total-steps", str(a.total_steps), "--seed", str(seed),
            "--window", "20"]  # (both normalise observations: fibra's PpoConfig default, the peer's)


def run(a, system, seed):
    """{solved, steps, seconds, command_s} or raises RuntimeError."""
    with tempfile.TemporaryDirectory(prefix="b11-") as tmp:
        cmd = command(a, system, seed, tmp)
        rc, text, command_s = run_program(cmd, tmp, a.time_limit)
    m = SOLVED.search(text)
    if rc == 0 and m and "not solved" not in text:
        return {"solved": True, "steps": int(m.group(1)), "seconds": float(m.group(2)), "command_s": command_s}
    if rc == 1 and "not solved" in text:
        return {"solved": False, "steps": None, "seconds": None, "command_s": command_s}
    why = "no answer within the time limit" if rc is None else f"exit status {rc}"
    raise RuntimeError(f"{' '.join(cmd)}: {why}\n{text[-3000:]}")


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def measure():
    a = parse_args()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    cores = os.cpu_count() or 1
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results, failures = {s: [] for s in a.systems}, []
    for seed in a.seeds:
        for s in a.systems:
            try:
                x = run(a, s, seed)
                results[s].append(x)
                what = (f"solved in {x['steps']} steps, {x['seconds']:.2f} s" if x["solved"] else "not solved")
                print(f"b11: seed {seed}, {s}: {what} (command {x['command_s']:.1f} s)", file=sys.stderr, flush=True)
            except RuntimeError as e:
                failures.append((s, seed))
                print(f"b11: seed {seed}, {s} failed: {e}", file=sys.stderr, flush=True)
    fig = {s: {k: median([x[k] for x in results[s] if x["solved"]]) for k in ("steps", "seconds", "command_s")}
           for s in a.systems}
    solved = {s: sum(x["solved"] for x in results[s]) for s in a.systems}
    over = (f"{a.workers} workers on {cores} cores: oversubscribed" if a.workers >= cores else f"{a.workers} workers")
    if a.rows:  # the suite's rows: one system's figures (parse_args allows one with --rows)
        s = a.systems[0]
        print(f"# b11: CartPole-v1 PPO, {over}, {a.workers * a.envs_per_worker} copies x {a.steps} steps, "
              f"seeds {','.join(map(str, a.seeds))}, {started}")
        print("benchmark,metric,value,unit")
        print(f"b11,steps_to_solve,{fig[s]['steps']:.0f},steps")
        print(f"b11,seconds_to_solve,{fig[s]['seconds']:.3f},s")
        print(f"b11,command_seconds,{fig[s]['command_s']:.3f},s")
        print(f"b11,solved_runs,{solved[s]},runs")
    else:
        print(f"B11, CartPole-v1 PPO, {started}; {over}; {a.workers * a.envs_per_worker} copies x {a.steps} steps; "
              f"seeds {', '.join(map(str, a.seeds))}; medians over the solved runs\n")
        print("| system | solved | env steps to solve | training s | whole command s |")
        print("| --- | --- | --- | --- | --- |")
        for s in a.systems:
            print(f"| {s} | {solved[s]} of {len(a.seeds)} | {fig[s]['steps']:.0f} | {fig[s]['seconds']:.2f} | "
                  f"{fig[s]['command_s']:.2f} |")
    return 1 if failures else 0


def main():
    try:
        return measure()
    except Stopped as e:
        print(f"b11: stopped by {e}", file=sys.stderr, flush=True)
        return 128 + e.signum


if __name__ == "__main__":
    sys.exit(main())
