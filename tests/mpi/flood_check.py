#!/usr/bin/env python3
"""Runs tests/mpi/flood_job.cpp with its stdout in a file and in a pipe, with and without lanes and
prefixes, and checks that every line printed by the 4 tasks arrives whole and exactly once.
A task's last line has no newline; when one executor runs two of the tasks, the next task's first
line continues it, as docs/pool.md says (the executor cannot tell where a task's output stops), so
that one join, and no other, is read as the two lines it is.

    flood_check.py <flood_job binary> [lines per task]
"""
import os
import re
import subprocess
import sys
import tempfile

job = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
body = r"task (\d) out line (\d+) of %d: the quick brown fox jumps over the lazy dog" % n
line = re.compile(r"^(\(worker \d+ pid \d+\) )?" + body + "$")
joined = re.compile(r"^(\(worker \d+ pid \d+\) )?" + body + body + "$")


def check(name, text):
    seen = {t: set() for t in range(4)}
    broken = []
    count = 0
    for raw in text.splitlines():
        m = line.match(raw)
        if m:
            seen[int(m.group(2))].add(int(m.group(3)))
            count += 1
            continue
        j = joined.match(raw)  # a task's last line, then the next task of the same executor
        if j and int(j.group(3)) == n - 1 and int(j.group(5)) == 0 and j.group(2) != j.group(4):
            seen[int(j.group(2))].add(n - 1)
            seen[int(j.group(4))].add(0)
            count += 2
            continue
        broken.append(raw)
    missing = {t: n - len(s) for t, s in seen.items() if len(s) != n}
    if broken or missing or count != 4 * n:
        print(f"FAIL: {name}: {len(broken)} broken lines (first: {broken[:3]}), lines missing per task: {missing}, "
              f"{count} whole lines for {4 * n}")
        return False
    print(f"ok: {name}: {4 * n} lines, all whole")
    return True


ok = True
for lanes in ("1", "0"):
    for prefix in ("0", "1"):
        env = dict(os.environ, FIBRA_LANES=lanes, FIBRA_OUTPUT_PREFIX=prefix, FLOOD_LINES=str(n), FIBRA_PROGRESS="0")
        name = f"FIBRA_LANES={lanes} FIBRA_OUTPUT_PREFIX={prefix}"
        with tempfile.TemporaryFile() as out:
            r = subprocess.run([job], stdout=out, stderr=subprocess.PIPE, env=env, timeout=100)
            out.seek(0)
            ok &= r.returncode == 0 and check(name + ", stdout a file", out.read().decode(errors="replace"))
        r = subprocess.run([job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=100)
        ok &= r.returncode == 0 and check(name + ", stdout a pipe", r.stdout.decode(errors="replace"))
print("PASS: every line whole" if ok else "FAIL: lines were spliced or lost")
sys.exit(0 if ok else 1)
