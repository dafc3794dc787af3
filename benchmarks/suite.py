#!/usr/bin/python3
"""Runs fibra's benchmarks and its peers' side by side, and writes CSVs, plots and a results table.

    benchmarks/run.sh [--quick] [--benchmarks b1,b2,b3,b5,b6,b8,b9,sim,tune,es] [--systems fibra,raw_mpi,...]
                      [--repeats N] [--out DIR] [--docs] [--build DIR]

run.sh installs and builds what is needed, then runs this with Debian's /usr/bin/python3. Every
(benchmark, system) pair runs --repeats times; within a repetition every system runs once, in an
order that rotates from one repetition to the next, so that machine noise hits all alike. Each run
is one program printing rows (benchmarks/README.md is the contract); a run that fails or passes its
time limit is recorded as failed, its output kept under <out>/logs/, and the suite goes on. `es` (ES
scaling on CartPole-v1) runs benchmarks/es_scaling.py for one system at a time: fibra's ES job
(build/jobs/es) and its multiprocessing peer (benchmarks/peers/es_mp.py); no other system has it.
`b8` (queues, pipes, processes) runs for fibra and multiprocessing only, `b9` for fibra and raw MPI,
`sim` (the driver against 10 to 10,000 simulated agents, docs/architecture.md) for fibra alone,
`tune` (hyper-parameter search, B9 of BENCHMARKS.md) for fibra::tune and Optuna only.

Writes under --out (default benchmarks/results, or benchmarks/results/quick with --quick):
  <bench>.csv    every sample: benchmark,system,metric,repeat,value,unit, after `#` lines naming the
                 machine (cores, memory, versions, load average before and after)
  summary.csv    median, min, max and count of every figure (the figures of benchmarks not run this
                 time are kept from the run before)
  compare.md     each of fibra's medians beside the one summary.csv held before this run (the kept
                 figure: a regression shows as a ratio above 1 for a time, below 1 for a rate) and
                 beside its peer's median from this run (PEER); also printed at the end
  machine.json   the machine and versions
  plots/*.png    B1 wall time against task duration, B2/B3/B6/B8 bars, B5 start-up against workers
  table.md       the results table, with fibra's ratio to the best peer and to raw MPI
With --docs, also copies the plots to docs/benchmarks/ and puts the table into docs/benchmarks.md
between its `<!-- suite:begin -->` and `<!-- suite:end -->` lines.
"""
import argparse
import csv
import datetime
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import report
from job_runs import stop_group
from report import TITLES, machine_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
BENCHES = ["b1", "b2", "b3", "b5", "b6", "b8", "b9", "sim", "tune", "es", "b11", "b12", "b12es", "esdriver"]
SYSTEMS = report.SYSTEMS
PEER_SCRIPT = {"multiprocessing": "mp_peer.py", "mpi4py_futures": "mpi4py_peer.py", "dask": "dask_peer.py",
               "ipyparallel": "ipyparallel_peer.py", "optuna": "optuna_peer.py"}
# The peer each of fibra's figures is read against, from the same run (the system BENCHMARKS.md
# names as the one to beat there).
PEER = {"b1": "multiprocessing", "b2": "multiprocessing", "b3": "multiprocessing", "b5": "multiprocessing",
        "b6": "raw_mpi", "b8": "multiprocessing", "b9": "raw_mpi", "tune": "optuna", "es": "multiprocessing",
        "b11": "multiprocessing"}
FIBRA_PROGRAM = {"b1": "b1_overhead", "b2": "b2_throughput", "b3": "b3_recovery", "b5": "b5_idle",
                 "b6": "b6_payload", "b8": "b8_queues", "b9": "b9_agents", "sim": "b9_simulated",
                 "tune": "b9_tune", "b12": "b12_sampling", "b12es": "b12_es",
                 "esdriver": "es_driver"}

# The flags of each benchmark (benchmarks/README.md), full and quick. Every run makes one sample.
FLAGS = {
    "full": {
        "b1": ["--repeats", "1"],
        "b2": ["--repeats", "1"],
        "b3": ["--repeats", "1"],
        "b5": ["--workers", "1,4,16,64", "--idle-seconds", "5"],
        "b6": ["--repeats", "5"],
        "b8": ["--items", "200000", "--batch", "1000", "--roundtrips", "2000", "--starts", "20", "--repeats", "1"],
        "b9": ["--agents", "4,16,64,128", "--roundtrips", "2000", "--map-items", "2000000", "--idle-seconds", "3"],
        "sim": ["--agents", "10,100,1000,10000", "--tasks", "200000", "--roundtrips", "2000", "--idle-seconds", "3",
                "--silent-every", "100"],
        "tune": ["--trials", "10000"],
        "es": ["--workers", "1,2,4,8", "--population", "1024", "--generations", "8", "--rounds", "1"],
        "b11": ["--seeds", "1,2,3,4,5"],
        "b12": ["--workers", "1,2,4,8", "--repeats", "3"],
        "b12es": ["--workers", "1,2,4,8", "--rounds", "10", "--repeats", "3"],
        "esdriver": ["--agents", "10,100,1000,10000", "--populations", "1000,10000,100000"],
    },
    "quick": {
        "b1": ["--repeats", "1", "--scale", "0.1", "--durations-ms", "1,10,100"],
        "b2": ["--repeats", "1", "--map-tasks", "200000", "--async-tasks", "5000", "--roundtrips", "200"],
        "b3": ["--repeats", "1", "--tasks", "400"],
        "b5": ["--workers", "1,4", "--idle-seconds", "1"],
        "b6": ["--repeats", "2", "--bytes", "8388608"],
        "b8": ["--items", "20000", "--roundtrips", "300", "--starts", "5", "--repeats", "1"],
        "b9": ["--agents", "4,16", "--roundtrips", "200", "--map-items", "200000", "--idle-seconds", "1"],
        "sim": ["--agents", "10,1000", "--tasks", "20000", "--roundtrips", "200", "--idle-seconds", "1"],
        "tune": ["--trials", "300"],
        "es": ["--workers", "1,2", "--population", "64", "--generations", "3", "--rounds", "1"],
        "b11": ["--seeds", "1"],
        "b12": ["--workers", "1,2", "--rounds", "5", "--repeats", "1"],
        "b12es": ["--workers", "1,2", "--rounds", "2", "--repeats", "1"],
        "esdriver": ["--agents", "10,1000", "--populations", "1000,10000", "--generations", "1"],
    },
}
# raw_mpi is one program for B2's round trip, B5's spawn and B6's payload: the flags for each.
RAW_MPI_FLAGS = {
    "full": {
        "b2": ["--roundtrips", "2000", "--bytes", "8", "--payload-repeats", "1", "--spawn", "0"],
        "b5": ["--roundtrips", "10", "--bytes", "8", "--payload-repeats", "1", "--spawn", "1,4,16,64"],
        "b6": ["--roundtrips", "10", "--bytes", "67108864", "--payload-repeats", "5", "--spawn", "0"],
        "b9": ["--roundtrips", "10", "--bytes", "8", "--payload-repeats", "1", "--spawn", "4,16,64,128", "--b9"],
    },
    "quick": {
        "b2": ["--roundtrips", "200", "--bytes", "8", "--payload-repeats", "1", "--spawn", "0"],
        "b5": ["--roundtrips", "10", "--bytes", "8", "--payload-repeats", "1", "--spawn", "1,4"],
        "b6": ["--roundtrips", "10", "--bytes", "8388608", "--payload-repeats", "2", "--spawn", "0"],
        "b9": ["--roundtrips", "10", "--bytes", "8", "--payload-repeats", "1", "--spawn", "4,16", "--b9"],
    },
}
TIME_LIMIT_S = {"full": {"b1": 900, "b2": 600, "b3": 900, "b5": 900, "b6": 300, "b8": 600, "b9": 900, "sim": 600, "tune": 1800, "es": 900,
                         "b11": 900, "b12": 300, "b12es": 600, "esdriver": 300},
                "quick": {"b1": 240, "b2": 240, "b3": 300, "b5": 300, "b6": 180, "b8": 180, "b9": 240, "sim": 180, "tune": 180, "es": 180,
                          "b11": 180, "b12": 120, "b12es": 120, "esdriver": 120}}
# ES scaling: one runner for both of its systems (fibra's job and the multiprocessing peer).
ES_SYSTEMS = ["fibra", "multiprocessing"]

def command(bench, system, mode, build):
    """The command line of one run, or None when the system has no program for the benchmark."""
    if bench == "es":
        if system not in ES_SYSTEMS:
            return None
        return [PY, os.path.join(ROOT, "benchmarks", "es_scaling.py"), "--rows", "--systems", system, "--build",
                build] + FLAGS[mode][bench]
    if bench == "b11":  # PPO's time to solve: fibra's job beside the same PPO in Python (torch)
        if system not in ES_SYSTEMS:
            return None
        return [PY, os.path.join(ROOT, "benchmarks", "b11_ppo.py"), "--rows", "--systems", system, "--build",
                build] + FLAGS[mode][bench]
    # sampling (its floor, one plain loop, is in the program) and the ES driver against simulated agents
    if bench in ("b12", "b12es", "esdriver") and system != "fibra":
        return None
    if system == "fibra":
        return [os.path.join(build, "benchmarks", FIBRA_PROGRAM[bench])] + FLAGS[mode][bench]
    if bench == "sim":  # the driver against simulated agents: no peer runs it
        return None
    if bench == "b9" and system != "raw_mpi":  # B5 with one agent per worker: fibra beside raw MPI's spawn
        return None
    if (bench == "tune") != (system == "optuna"):  # the search's overhead: fibra::tune beside Optuna only
        return None
    if bench == "b8" and system != "multiprocessing":  # queues, pipes, processes: fibra beside multiprocessing
        return None
    if system == "raw_mpi":
        if bench not in RAW_MPI_FLAGS[mode]:
            return None
        return [os.path.join(build, "benchmarks", "raw_mpi"), "--repeats", "1"] + RAW_MPI_FLAGS[mode][bench]
    return [PY, os.path.join(ROOT, "benchmarks", "peers", PEER_SCRIPT[system]), bench] + FLAGS[mode][bench]


def run_env():
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "EVENT_NOEPOLL": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "FIBRA_PROGRESS": "0",
                "PYTHONPATH": os.path.join(ROOT, "benchmarks", "peers"), "PYTHONDONTWRITEBYTECODE": "1",
                "MPLBACKEND": "Agg"})
    return env


def run_one(cmd, limit_s, log_base):
    """Runs `cmd` in its own process group with a time limit. Returns (rows, comments, error);
    error is None when it exited 0 and printed rows. Its stdout goes to a file (a process of the run
    in a session of its own, such as Open MPI's orted, may hold it open after the run ends)."""
    start = time.monotonic()
    with open(log_base + ".out", "w+") as out, open(log_base + ".err", "w") as err:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        begin = out.tell()
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=run_env(), cwd=ROOT,
                                    start_new_session=True)
        except OSError as e:
            return [], [], f"could not start {cmd[0]}: {e}"
        try:
            proc.wait(timeout=limit_s)
            error = None if proc.returncode == 0 else f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            error = f"no answer within its limit of {limit_s} s (stopped)"
        finally:
            stop_group(proc)  # also after a normal end: nothing of a run may outlive it
        out.seek(begin)
        text = out.read()
    rows, comments = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            comments.append(line[1:].strip())
        elif line.count(",") >= 3 and not line.startswith("benchmark,"):
            b, metric, value, unit = line.split(",", 3)
            try:
                rows.append((b, metric, float(value), unit))
            except ValueError:
                error = error or f"unreadable row: {line}"
    if not error and not rows:
        error = "it printed no rows"
    if error:
        error += f" after {time.monotonic() - start:.1f} s; its output is in {log_base}.out/.err"
        rows = []  # figures of a run that failed were not all checked
    return rows, comments, error


def version_of(module):
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_info():
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"

    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    debian = open("/etc/debian_version").read().strip() if os.path.exists("/etc/debian_version") else "?"
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1),
        "kernel": platform.release(),
        "debian": debian,
        "open_mpi": out(["ompi_info", "--version"]).splitlines()[0] if out(["ompi_info", "--version"]) else "?",
        "python": platform.python_version(),
        "fibra_commit": out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        "versions": {m: version_of(m) for m in ("mpi4py", "dask", "distributed", "ipyparallel", "numpy",
                                                "matplotlib")},
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 1 repetition: a smoke run of a few minutes")
    p.add_argument("--benchmarks", default=",".join(BENCHES))
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--repeats", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    p.add_argument("--out", default=None)
    p.add_argument("--docs", action="store_true", help="update docs/benchmarks.md and docs/benchmarks/*.png")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: draw the plots and the table again from the CSVs in --out")
    a = p.parse_args()
    a.mode = "quick" if a.quick else "full"
    a.benches = [b for b in a.benchmarks.split(",") if b]
    a.systems = [s for s in a.systems.split(",") if s]
    for b in a.benches:
        if b not in BENCHES:
            p.error(f"unknown benchmark '{b}' (the benchmarks are {', '.join(BENCHES)})")
    for s in a.systems:
        if s not in SYSTEMS:
            p.error(f"unknown system '{s}' (the systems are {', '.join(SYSTEMS)})")
    a.repeats = a.repeats or (1 if a.quick else 3)
    if a.repeats < 1:
        p.error("--repeats must be at least 1")
    a.out = os.path.abspath(a.out or os.path.join(ROOT, "benchmarks", "results", "quick" if a.quick else ""))
    a.build = os.path.abspath(a.build)
    es = os.path.join(a.build, "jobs", "es")
    if "es" in a.benches and "fibra" in a.systems and not a.report_only and not os.access(es, os.X_OK):
        p.error(f"{es} is not built: run benchmarks/run.sh (it builds), or pass --build DIR")
    for b in a.benches if not a.report_only else []:
        if b in ("es", "b11"):
            continue
        for system in ("fibra", "raw_mpi"):
            cmd = command(b, system, a.mode, a.build) if system in a.systems else None
            if cmd and not os.access(cmd[0], os.X_OK):
                p.error(f"{cmd[0]} is not built: run benchmarks/run.sh (it builds), or pass --build DIR")
    return a


class Progress:
    """One line per run on stderr: where the suite is, how long the run took, and an estimate of
    what is left (from the mean time of the runs so far)."""

    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.monotonic()

    def begin(self, what):
        print(f"[{self.done + 1}/{self.total}] {what} ...", file=sys.stderr, flush=True)

    def end(self, what, seconds, error):
        self.done += 1
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done)
        status = f"FAILED: {error}" if error else "ok"
        print(f"[{self.done}/{self.total}] {what}: {status} ({seconds:.1f} s; "
              f"{elapsed / 60:.1f} min so far, about {left / 60:.1f} min left)", file=sys.stderr, flush=True)


def main():
    a = parse_args()
    if a.report_only:
        return report_again(a)
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    machine = machine_info()
    plan = []
    for rep in range(a.repeats):
        for b in a.benches:
            systems = [s for s in a.systems if command(b, s, a.mode, a.build)]
            k = rep % len(systems) if systems else 0
            for s in systems[k:] + systems[:k]:
                plan.append((rep, b, s))
    print(f"suite: {len(plan)} runs ({a.mode}), {a.repeats} repetition(s) of {', '.join(a.benches)} for "
          f"{', '.join(a.systems)}; results in {a.out}", file=sys.stderr, flush=True)
    samples, comments, failures = [], {}, []
    progress = Progress(len(plan))
    for rep, b, s in plan:
        what = f"repetition {rep + 1}/{a.repeats}: {b} {s}"
        progress.begin(what)
        t = time.monotonic()
        rows, notes, error = run_one(command(b, s, a.mode, a.build), TIME_LIMIT_S[a.mode][b],
                                     os.path.join(a.out, "logs", f"{b}-{s}-{rep + 1}"))
        progress.end(what, time.monotonic() - t, error)
        if error:
            failures.append((b, s, rep + 1, error))
        seen = comments.setdefault((b, s), [])
        seen += [n if rep == 0 else f"(repetition {rep + 1}) {n}" for n in notes if n not in seen]
        for bench, metric, value, unit in rows:
            if bench == b:
                samples.append((b, s, metric, rep + 1, value, unit))
    machine["load_after"] = [round(x, 2) for x in os.getloadavg()]
    machine["failures"] = [{"benchmark": b, "system": s, "repeat": r, "error": e} for b, s, r, e in failures]
    machine["mode"] = a.mode
    machine["repeats"] = a.repeats

    write_results(a, machine, samples, comments)
    return write_report(a, machine, samples, comments, failures)


def read_results(a):
    """The samples and notes of the CSVs in a.out (as main() wrote them), and its machine.json."""
    with open(os.path.join(a.out, "machine.json")) as f:
        machine = json.load(f)
    samples, comments = [], {}
    for b in a.benches:
        path = os.path.join(a.out, f"{b}.csv")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            lines = f.read().splitlines()
        for line in lines[1:]:
            if line.startswith("# ") and ": " in line:
                system, note = line[2:].split(": ", 1)
                comments.setdefault((b, system), []).append(note)
        for r in csv.DictReader(line for line in lines if not line.startswith("#")):
            samples.append((r["benchmark"], r["system"], r["metric"], int(r["repeat"]), float(r["value"]), r["unit"]))
    a.systems = [s for s in a.systems if any(x[1] == s for x in samples)]
    return machine, samples, comments


def report_again(a):
    machine, samples, comments = read_results(a)
    failures = [(f["benchmark"], f["system"], f["repeat"], f["error"]) for f in machine.get("failures", [])]
    return write_report(a, machine, samples, comments, failures, compare_to_kept=False)


def read_summary(path):
    """{(bench, system, metric): dict(median, min, max, n, zeros, unit)} of a summary.csv; {} if none."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(r["benchmark"], r["system"], r["metric"]): dict(median=float(r["median"]), min=float(r["min"]),
                                                                  max=float(r["max"]), n=int(r["samples"]), zeros=0,
                                                                  unit=r["unit"])
                for r in csv.DictReader(f)}


def ratio(x, y):
    return x / y if y and math.isfinite(x) and math.isfinite(y) else math.nan


def compare(summary, kept, benches):
    """compare.md's text: fibra's medians of this run beside the kept ones and the peer's."""
    rows = ["| benchmark | metric | fibra now | kept | now / kept | peer | peer now | fibra / peer |",
            "|---|---|---|---|---|---|---|---|"]
    for (b, s, metric), v in sorted(summary.items()):
        if s != "fibra" or b not in benches:
            continue
        old = kept.get((b, s, metric))
        peer = PEER.get(b)
        theirs = summary.get((b, peer, metric)) if peer else None
        cell = lambda x: "" if x is None or not math.isfinite(x) else f"{x:.4g}"
        rows.append(f"| {b} | {metric} ({v['unit']}) | {cell(v['median'])} | {cell(old and old['median'])} | "
                    f"{cell(ratio(v['median'], old['median']) if old else None)} | {peer if theirs else ''} | "
                    f"{cell(theirs and theirs['median'])} | "
                    f"{cell(ratio(v['median'], theirs['median']) if theirs else None)} |")
    return "\n".join(rows) + "\n"


def write_report(a, machine, samples, comments, failures, compare_to_kept=True):
    """summary.csv, compare.md, the plots, table.md (and the docs with --docs); 1 if any run failed."""
    summary = summarize(samples)
    kept = read_summary(os.path.join(a.out, "summary.csv")) if compare_to_kept else {}
    if compare_to_kept:
        text = compare(summary, kept, a.benches)
        with open(os.path.join(a.out, "compare.md"), "w") as f:
            f.write(f"fibra against the kept run (summary.csv before this one) and its peer in this run\n\n{text}")
        print(text, file=sys.stderr)
    # The figures of benchmarks not run this time stay as they were.
    merged = {k: v for k, v in kept.items() if k[0] not in a.benches}
    write_summary(a.out, {**merged, **summary})
    plots = report.plots(summary, samples, os.path.join(a.out, "plots"))
    table = report.table(summary, machine, comments, failures, a)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table)
    if a.docs:
        report.update_docs(ROOT, report.table(summary, machine, comments, failures, a, images="benchmarks"), plots)
    print(f"suite: wrote {len(samples)} samples, {len(plots)} plots and table.md to {a.out}"
          + (" and docs/benchmarks.md" if a.docs else ""), file=sys.stderr)
    for b, s, r, e in failures:
        print(f"suite: {b} {s} repetition {r} failed: {e}", file=sys.stderr)
    return 1 if failures else 0


def write_results(a, machine, samples, comments):
    with open(os.path.join(a.out, "machine.json"), "w") as f:
        json.dump(machine, f, indent=2)
    for b in a.benches:
        with open(os.path.join(a.out, f"{b}.csv"), "w", newline="") as f:
            f.write(f"# {TITLES[b]}; machine: {machine_line(machine)}\n")
            for (bench, s), notes in sorted(comments.items()):
                if bench == b:
                    for n in notes:
                        f.write(f"# {s}: {n}\n")
            w = csv.writer(f)
            w.writerow(["benchmark", "system", "metric", "repeat", "value", "unit"])
            for row in samples:
                if row[0] == b:
                    w.writerow(row)


def summarize(samples):
    """{(bench, system, metric): dict(median, min, max, n, unit)} over the finite samples."""
    groups = {}
    for b, s, metric, _rep, value, unit in samples:
        groups.setdefault((b, s, metric), ([], unit))[0].append(value)
    out = {}
    for key, (values, unit) in groups.items():
        finite = [v for v in values if math.isfinite(v)]
        out[key] = dict(median=statistics.median(finite) if finite else math.nan,
                        min=min(finite) if finite else math.nan, max=max(finite) if finite else math.nan,
                        n=len(finite), zeros=sum(1 for v in finite if v == 0), unit=unit)
    return out


def write_summary(out_dir, summary):
    with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["benchmark", "system", "metric", "median", "min", "max", "samples", "unit"])
        for (b, s, metric), v in sorted(summary.items()):
            w.writerow([b, s, metric, f"{v['median']:.6g}", f"{v['min']:.6g}", f"{v['max']:.6g}", v["n"], v["unit"]])


if __name__ == "__main__":
    sys.exit(main())
