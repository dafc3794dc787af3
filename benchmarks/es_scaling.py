#!/usr/bin/python3
"""ES scaling on CartPole-v1: fibra's ES job (build/jobs/es) against the same OpenAI-ES written with
Python's multiprocessing.Pool and NumPy (benchmarks/peers/es_mp.py), on 1, 2, 4 and 8 workers at a
fixed population, with no early stop and a fixed number of generations.

    benchmarks/es_scaling.py [--workers 1,2,4,8] [--population 1024] [--generations 8] [--rounds 3]
                             [--systems fibra,multiprocessing] [--seed 1] [--build DIR] [--rows]

Builds nothing: it expects build/jobs/es (`cmake --build build --target es`). In each round it runs
fibra on 1 worker, the peer on 1, fibra on 2, the peer on 2, and so on. From each run it takes the
median time per generation over generations 2..G (generation 1 also builds the noise table in every
process) and the episodes per second that makes (population / that time); the figure of each
(system, workers) is the median over the rounds, and the ratio is the peer's time over fibra's.
Both programs use the same seeds and the same generators, so they learn the same curve (up to
rounding); the final mean return (the population's, in generation G) of each is printed to show it.
Episodes lengthen as the policy learns, so the time per generation is only comparable at equal
returns. Worker counts above the machine's cores are oversubscribed, and the output says so.

Prints a Markdown table (with the date, the machine, the command and the load average); with
--rows, the suite's rows instead (benchmarks/README.md: `#` lines, then `benchmark,metric,value,unit`):

    es,generation_<n>_workers_s,<seconds>,s            median time per generation
    es,episodes_<n>_workers_per_s,<rate>,episodes/s    population / that time
    es,final_return_<n>_workers,<return>,return        the population's mean return in generation G

A run that fails (or passes its time limit) is reported on stderr with its output, and the exit
status is 1. On SIGTERM, SIGINT or SIGHUP the running program's process group is killed first.
"""
import argparse
import datetime
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from job_runs import Stopped, on_signal, run_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
PEER = os.path.join(ROOT, "benchmarks", "peers", "es_mp.py")
SYSTEMS = ["fibra", "multiprocessing"]
GENERATION = re.compile(r"^generation\s+(\d+): mean\s+(\S+)\s+best\s+(\S+)\s+(\S+) episodes/s\s+(\S+) k steps/s\s+"
                        r"\((\S+) s\)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="1,2,4,8")
    p.add_argument("--population", type=int, default=1024)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--time-limit", type=float, default=600, help="seconds per run")
    p.add_argument("--rows", action="store_true", help="print the suite's rows, not the Markdown table")
    a = p.parse_args()
    a.workers = [int(n) for n in a.workers.split(",") if n]
    a.systems = [s for s in a.systems.split(",") if s]
    for s in a.systems:
        if s not in SYSTEMS:
            p.error(f"unknown system '{s}' (the systems are {', '.join(SYSTEMS)})")
    if not a.workers or min(a.workers) < 1:
        p.error("--workers: a list of counts of at least 1")
    if a.population < 2 or a.population % 2 or a.generations < 2 or a.rounds < 1:
        p.error("--population even and at least 2, --generations at least 2, --rounds at least 1")
    a.es = os.path.join(os.path.abspath(a.build), "jobs", "es")
    if "fibra" in a.systems and not os.access(a.es, os.X_OK):
        p.error(f"{a.es} is not built: cmake --build build --target es (or pass --build DIR)")
    return a


def command(a, system, n, tmp):
    common = ["--target", "1e9", "--generations", str(a.generations), "--population", str(a.population),
              "--workers", str(n), "--eval-episodes", "1", "--seed", str(a.seed)]
    if system == "fibra":
        return [a.es] + common + ["--csv", os.path.join(tmp, "es-cartpole.csv")]
    return [PY, PEER] + common


def run(a, system, n):
    """One run: {seconds, episodes_per_s, final_return, first_return} or raises RuntimeError."""
    with tempfile.TemporaryDirectory(prefix="es-scaling-") as tmp:
        cmd = command(a, system, n, tmp)
        rc, text, _ = run_program(cmd, tmp, a.time_limit)
    gens = [m.groups() for m in map(GENERATION.match, text.splitlines()) if m]
    # exit status 1 is the job's "target not reached", which a target of 1e9 always is
    if rc not in (0, 1) or len(gens) != a.generations or "not reached" not in text:
        why = "no answer within the time limit" if rc is None else f"exit status {rc}, {len(gens)} generations"
        raise RuntimeError(f"{' '.join(cmd)}: {why}\n{text[-3000:]}")
    # The time from the episodes/s figure (population / time, printed to 7 digits): the job prints
    # the time itself to 0.01 s only.
    times = [a.population / float(g[3]) for g in gens[1:]]
    t = statistics.median(times)
    return {"seconds": t, "episodes_per_s": a.population / t, "final_return": float(gens[-1][1]),
            "first_return": float(gens[0][1])}


def machine():
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = "?"
    return (f"{platform.node()}, {os.cpu_count()} cores, {mem:.0f} GiB, Linux {platform.release()}, "
            f"Python {platform.python_version()}; fibra {commit or '?'}")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    try:
        return measure()
    except Stopped as e:
        print(f"es_scaling: stopped by {e}", file=sys.stderr, flush=True)
        return 128 + e.signum


def measure():
    a = parse_args()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results, failures = {}, []
    for r in range(a.rounds):
        for n in a.workers:
            for s in a.systems:
                t0 = time.monotonic()
                try:
                    x = run(a, s, n)
                    results.setdefault((s, n), []).append(x)
                    print(f"es_scaling: round {r + 1}/{a.rounds}, {s} on {n} workers: {x['seconds']:.4f} s/generation, "
                          f"{x['episodes_per_s']:.0f} episodes/s, final mean return {x['final_return']:.2f} "
                          f"({time.monotonic() - t0:.1f} s)", file=sys.stderr, flush=True)
                except RuntimeError as e:
                    failures.append((s, n, r + 1))
                    print(f"es_scaling: round {r + 1}, {s} on {n} workers failed: {e}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    def fig(s, n, key):
        return median([x[key] for x in results.get((s, n), [])])

    over = [n for n in a.workers if n > cores]
    oversubscribed = (f"{', '.join(map(str, over))} workers oversubscribed: this machine has {cores} cores"
                      if over else "")
    if a.rows:
        print(f"# es scaling: CartPole-v1, population {a.population}, {a.generations} generations, no early stop; "
              f"median time per generation over generations 2..{a.generations}; {a.rounds} round(s); seed {a.seed}")
        if oversubscribed:
            print(f"# {oversubscribed}")
        print("benchmark,metric,value,unit")
        for s in a.systems:
            for n in a.workers:
                if (s, n) in results:
                    print(f"es,generation_{n}_workers_s,{fig(s, n, 'seconds'):.6g},s")
                    print(f"es,episodes_{n}_workers_per_s,{fig(s, n, 'episodes_per_s'):.6g},episodes/s")
                    print(f"es,final_return_{n}_workers,{fig(s, n, 'final_return'):.6g},return")
        return 1 if failures else 0

    cmd = "benchmarks/es_scaling.py " + " ".join(sys.argv[1:])
    print(f"ES scaling, CartPole-v1: population {a.population}, {a.generations} generations, no early stop "
          f"(`--target 1e9 --eval-episodes 1`), seed {a.seed}. {started}; {machine()}; load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after. Command: `{cmd.strip()}`. "
          f"Each figure: the median over {a.rounds} round(s) (fibra and multiprocessing alternating) of each "
          f"run's median time per generation over generations 2..{a.generations}; ratio: multiprocessing's "
          f"time over fibra's." + (f" {oversubscribed}." if oversubscribed else ""))
    print()
    print("| workers | fibra s/generation | fibra episodes/s | multiprocessing s/generation | multiprocessing "
          "episodes/s | ratio | final mean return fibra / multiprocessing |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in a.workers:
        ft, mt = fig("fibra", n, "seconds"), fig("multiprocessing", n, "seconds")
        ratio = mt / ft if ft > 0 and mt > 0 else float("nan")
        note = " (oversubscribed)" if n > cores else ""
        print(f"| {n}{note} | {ft:.4f} | {fig('fibra', n, 'episodes_per_s'):,.0f} | {mt:.3f} | "
              f"{fig('multiprocessing', n, 'episodes_per_s'):,.0f} | {ratio:.1f}x | "
              f"{fig('fibra', n, 'final_return'):.2f} / {fig('multiprocessing', n, 'final_return'):.2f} |")
    if failures:
        print()
        print("Runs that failed: " + ", ".join(f"{s} on {n} workers (round {r})" for s, n, r in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
