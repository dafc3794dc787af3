#!/usr/bin/python3
"""Smoke test of the benchmark suite (benchmarks/suite.py --quick): B1 for fibra and every peer, B6
for fibra and the raw-MPI floor, ES scaling (1 and 2 workers, a small population) for fibra's ES job
and its multiprocessing peer. Checks that every system's run succeeded and produced its figures,
that the CSVs, the summary, the plots and the table were written, never how fast anything is.

    suite_smoke.py BUILD_DIR OUT_DIR
"""
import csv
import math
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = ["multiprocessing", "mpi4py_futures", "dask", "ipyparallel"]


def fail(what):
    print(f"FAIL: {what}", flush=True)
    sys.exit(1)


def samples(path):
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def main():
    build, out = sys.argv[1], sys.argv[2]
    shutil.rmtree(out, ignore_errors=True)
    runs = [("b1", ["fibra"] + PEERS), ("b6", ["fibra", "raw_mpi"]), ("es", ["fibra", "multiprocessing"])]
    for bench, systems in runs:
        cmd = ["/usr/bin/python3", "-B", os.path.join(ROOT, "benchmarks", "suite.py"), "--quick", "--benchmarks", bench,
               "--systems", ",".join(systems), "--build", build, "--out", os.path.join(out, bench)]
        print("$", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, timeout=900).returncode
        logs = os.path.join(out, bench, "logs")
        if rc != 0:
            for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
                print(f"---- {name}\n" + open(os.path.join(logs, name)).read()[-3000:])
            fail(f"the suite exited with status {rc} for {bench}")
        rows = samples(os.path.join(out, bench, f"{bench}.csv"))
        for s in systems:
            mine = [r for r in rows if r["system"] == s]
            wanted = {"b1": ["map_1ms_wall", "seq_1ms_wall", "map_100ms_ratio", "seq_100ms_ratio"],
                      "b6": ["payload_8mib_bandwidth", "payload_8mib_roundtrip_s"],
                      "es": [f"{m}" for n in (1, 2) for m in (f"generation_{n}_workers_s", f"episodes_{n}_workers_per_s",
                                                              f"final_return_{n}_workers")]}[bench]
            for metric in wanted:
                values = [float(r["value"]) for r in mine if r["metric"] == metric]
                if len(values) != 1 or not (math.isfinite(values[0]) and values[0] > 0):
                    fail(f"{bench} {s}: expected one positive {metric}, got {values}")
            if bench == "b1":
                # a 100 ms series of 5 worker-seconds cannot beat its ideal of 0.1 s: a clock or a
                # count that is wrong would show here
                ratio = [float(r["value"]) for r in mine if r["metric"] == "map_100ms_ratio"][0]
                if ratio < 0.99:
                    fail(f"b1 {s}: map at 100 ms took {ratio} of the ideal time, less than possible")
        if bench == "es":
            # the same seeds and generators: the peer learns fibra's curve (up to NumPy's rounding)
            final = {s: [float(r["value"]) for r in rows if r["system"] == s and r["metric"] == "final_return_2_workers"][0]
                     for s in systems}
            if abs(final["fibra"] - final["multiprocessing"]) > 0.1 * final["fibra"]:
                fail(f"es: fibra and its multiprocessing peer learned different curves: final mean returns {final}")
        png = os.path.join(out, bench, "plots", f"{bench}.png")
        if not os.path.exists(png) or open(png, "rb").read(8) != b"\x89PNG\r\n\x1a\n" or os.path.getsize(png) < 5000:
            fail(f"no plot {png}")
        table = open(os.path.join(out, bench, "table.md")).read()
        labels = {"fibra": "fibra", "raw_mpi": "raw MPI", "multiprocessing": "multiprocessing",
                  "mpi4py_futures": "mpi4py.futures", "dask": "Dask", "ipyparallel": "IPyParallel"}
        header = [line for line in table.splitlines() if line.startswith("| figure |")]
        columns = [c.strip() for c in header[0].strip("|").split("|")] if header else []
        if any(labels[s] not in columns for s in systems):
            fail(f"table.md of {bench} has no column for every system: {columns}")
        if "failed" in table:
            fail(f"table.md of {bench} reports a failed run")
        summary = samples(os.path.join(out, bench, "summary.csv"))
        if {r["system"] for r in summary} != set(systems):
            fail(f"summary.csv of {bench} has systems {sorted({r['system'] for r in summary})}")
    print("PASS: every system produced its figures, the CSVs, the plots and the table", flush=True)


if __name__ == "__main__":
    main()
