#!/usr/bin/python3
"""Runs the pool test that shrinks a pool (Lifecycle.ResizeGrowsAndShrinks) and checks fibra's line
about Open MPI's "PMIX ERROR: BAD-PARAM" (issue 46, case 11): printed once, and before any such line
of Open MPI's daemon, so that a user reads the explanation first.

    resize_message_check.py POOL_TESTS
"""
import os
import subprocess
import sys

EXPLAIN = "fibra: Pool::resize stops workers whose MPI job-mates go on"
PMIX = "PMIX ERROR: BAD-PARAM"


def main():
    env = dict(os.environ, FIBRA_PROGRESS="0", FIBRA_LOG_LEVEL="info")  # the line is at info level
    try:
        p = subprocess.run([sys.argv[1], "--gtest_filter=Lifecycle.ResizeGrowsAndShrinks"], env=env,
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        sys.exit("FAIL: Lifecycle.ResizeGrowsAndShrinks did not end within 120 s")
    if p.returncode != 0:
        sys.exit(f"FAIL: the test exited with {p.returncode}\n{p.stdout}\n{p.stderr}")
    lines = p.stderr.splitlines()
    explained = [i for i, line in enumerate(lines) if EXPLAIN in line]
    pmix = [i for i, line in enumerate(lines) if PMIX in line]
    if len(explained) != 1:
        sys.exit(f"FAIL: fibra's line about the shrink was printed {len(explained)} times, not once\n{p.stderr}")
    if pmix and pmix[0] < explained[0]:
        sys.exit(f"FAIL: Open MPI's '{PMIX}' came before fibra's line that explains it\n{p.stderr}")
    print(f"fibra's line once, at stderr line {explained[0] + 1}; Open MPI's {PMIX} lines after it: {len(pmix)}")


if __name__ == "__main__":
    main()
