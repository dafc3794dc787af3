"""jobs.hello: runs the hello program and checks its exit status and every value it prints
against the same numbers computed here, independently of fibra (Python's math.sin is the C
library's sin, so each rollout is the same double; the mean is summed in input order).

    check_hello.py HELLO
"""
import math
import subprocess
import sys


def rollout(seed):
    x = 0.0
    for t in range(1, 1001):
        x += math.sin(seed * 0.001 * t) / t
    return x


returns = [rollout(s) for s in range(1000)]
total = 0.0
for r in returns:  # std::accumulate: left to right from 0.0
    total += r
want = (
    "mean return over 1000 rollouts: %.6f\n" % (total / 1000.0)
    + "rollout(42) = %.6f\n" % rollout(42)
)

run = subprocess.run([sys.argv[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=100)
sys.stderr.write(run.stderr)
print("hello printed:\n" + run.stdout, end="")
if run.returncode != 0:
    sys.exit(f"FAIL: hello exited with status {run.returncode}")
if run.stdout != want:
    sys.exit("FAIL: hello's output differs from Python's values, expected:\n" + want)
print("PASS: exit status 0, values equal Python's")
