"""Checks a results file of checkpoint_job (N raw little-endian doubles, input order) against
work(x) computed here, independently of fibra: x = i * 0.25 - 100, s = x, 64 times
s = sin(s) + x * 1e-3, result x * 0.5 + s (Python's math.sin is the C library's sin, so the doubles
are the same). Exit status 1 with the first difference.

    expected_results.py RESULTS N
"""
import math
import struct
import sys

path, n = sys.argv[1], int(sys.argv[2])
data = open(path, "rb").read()
if len(data) != 8 * n:
    sys.exit(f"{path}: {len(data)} bytes, expected {8 * n} ({n} doubles)")
got = struct.unpack(f"<{n}d", data)
for i in range(n):
    x = i * 0.25 - 100
    s = x
    for _ in range(64):
        s = math.sin(s) + x * 1e-3
    want = x * 0.5 + s
    if got[i] != want:
        sys.exit(f"{path}: item {i}: got {got[i]!r}, expected {want!r}")
print(f"{n} results equal Python's")
