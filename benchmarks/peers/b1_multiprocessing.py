#!/usr/bin/python3
"""B1 of BENCHMARKS.md in Python's multiprocessing.Pool: the peer of benchmarks/b1_overhead.cpp.

    /usr/bin/python3 benchmarks/peers/b1_multiprocessing.py [--workers 5] [--durations-ms 1,10,100,1000]
        [--modes map,seq] [--repeats 3] [--scale 1.0]

Tasks only sleep; each series does `workers * scale` worker-seconds of sleeping (5,000 tasks of 1 ms
for 5 workers at scale 1). map: one pool.map(f, tasks) with the default chunk size. seq: the Fiber
paper's mode: apply_async of `workers` tasks, .get() each, repeat until all tasks are done. One Pool
for the whole run, warmed up once; runs go repeat by repeat, duration by duration, mode by mode.
Prints CSV (benchmark,metric,value,unit): per duration and mode the median wall time
(b1,<mode>_<dur>ms_wall) and its ratio to the ideal (b1,<mode>_<dur>ms_ratio), where
ideal = ceil(tasks / workers) * duration (= tasks * duration / workers at the defaults).
Standard library only; run with Debian's /usr/bin/python3.
"""
import argparse
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time


def sleep_ms(us):
    """Sleeps `us` microseconds and returns it."""
    time.sleep(us / 1e6)
    return us


def fail(what):
    print(f"b1: {what}", file=sys.stderr)
    sys.exit(1)


def check(out, tasks, series):
    if out != tasks:
        fail(f"{series} returned wrong results")


def run_map(pool, tasks, series):
    t = time.perf_counter()
    out = pool.map(sleep_ms, tasks)
    s = time.perf_counter() - t
    check(out, tasks, series)
    return s


def run_seq(pool, tasks, workers, series):
    out = []
    t = time.perf_counter()
    for i in range(0, len(tasks), workers):
        batch = [pool.apply_async(sleep_ms, (x,)) for x in tasks[i:i + workers]]
        out.extend(f.get() for f in batch)
    s = time.perf_counter() - t
    check(out, tasks, series)
    return s


def task_count(workers, scale, dur_ms):
    return max(1, round(workers * scale * 1000.0 / dur_ms))


def series_name(mode, dur_ms):
    return f"{mode}_{dur_ms:g}ms"


def memory_gib():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=5)
    p.add_argument("--durations-ms", default="1,10,100,1000")
    p.add_argument("--modes", default="map,seq")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0)
    a = p.parse_args()
    a.durations = [float(d) for d in a.durations_ms.split(",") if d]
    a.modes = [m for m in a.modes.split(",") if m]
    if any(m not in ("map", "seq") for m in a.modes):
        fail("unknown mode (modes are map and seq)")
    if any(d <= 0 for d in a.durations):
        fail("durations must be positive milliseconds")
    if a.workers < 1 or a.repeats < 1 or a.scale <= 0:
        fail("--workers, --repeats and --scale must be positive")
    return a


def main():
    a = parse_args()
    counts = ", ".join(f"{task_count(a.workers, a.scale, d)} x {d:g}ms" for d in a.durations)
    print(f"# python {platform.python_version()} multiprocessing.Pool ({multiprocessing.get_start_method()}), "
          f"{os.cpu_count()} hardware threads, {memory_gib():.0f} GiB, {a.workers} workers, scale {a.scale:g} "
          f"(tasks: {counts}), medians of {a.repeats} runs")
    print("benchmark,metric,value,unit", flush=True)

    wall = {}
    with multiprocessing.Pool(a.workers) as pool:
        warm = [1000] * (a.workers * 4)
        run_map(pool, warm, "warm-up map")
        run_seq(pool, warm, a.workers, "warm-up seq")
        for _ in range(a.repeats):
            for d in a.durations:
                tasks = [round(d * 1000)] * task_count(a.workers, a.scale, d)
                for m in a.modes:
                    name = series_name(m, d)
                    s = run_map(pool, tasks, name) if m == "map" else run_seq(pool, tasks, a.workers, name)
                    wall.setdefault(name, []).append(s)

    for d in a.durations:
        n = task_count(a.workers, a.scale, d)
        ideal = math.ceil(n / a.workers) * d / 1000.0
        for m in a.modes:
            name = series_name(m, d)
            w = statistics.median(wall[name])
            print(f"b1,{name}_wall,{w:.3f},s")
            print(f"b1,{name}_ratio,{w / ideal:.3f},x")


if __name__ == "__main__":
    main()
