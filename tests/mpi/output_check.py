#!/usr/bin/python3
"""Runs tests/mpi/output_job.cpp and checks what its tasks printed: every line whole, once, on the
right stream, with the worker prefix when FIBRA_OUTPUT_PREFIX=1 and without it when 0.

    output_check.py JOB
"""
import os
import re
import subprocess
import sys
import tempfile


def run(job, prefix, crash):
    env = dict(os.environ, FIBRA_OUTPUT_PREFIX=prefix, FIBRA_PROGRESS="0")
    with tempfile.TemporaryDirectory() as d:
        if crash:
            env["FIBRA_OUTPUT_CRASH"] = os.path.join(d, "crashed")
        p = subprocess.run([job], env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAIL: the job exited with {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout, p.stderr


def check(job, prefix, crash):
    out, err = run(job, prefix, crash)
    head = r"\(worker [12] pid \d+\) " if prefix == "1" else ""
    for i in range(8):
        want = re.compile("^" + head + f"line {i} part a,line {i} part b,line {i} end$", re.M)
        n = len(want.findall(out))
        # with the crash, task 5 runs twice (its first attempt is killed after printing)
        expected = (2 if crash and i == 5 else 1)
        if n != expected:
            sys.exit(f"FAIL (prefix={prefix}, crash={crash}): line {i} whole {n} times, expected {expected}:\n{out}")
        if len(re.findall("^" + head + f"err {i}$", err, re.M)) != expected:
            sys.exit(f"FAIL (prefix={prefix}, crash={crash}): stderr line {i} not whole:\n{err}")
    if crash and not re.search("^" + head + "last words of 5$", out, re.M):
        sys.exit(f"FAIL: the crashed task's last piece of output is missing or not on its own line:\n{out}")
    if "results ok" not in out:
        sys.exit(f"FAIL: the results were wrong:\n{out}")


def main():
    job = sys.argv[1]
    check(job, "1", crash=False)
    check(job, "0", crash=False)
    check(job, "1", crash=True)
    print("PASS: every line whole, with and without the worker prefix, and after a crash")


if __name__ == "__main__":
    main()
