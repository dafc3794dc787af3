#!/usr/bin/python3
"""The multiprocessing peer: Python's multiprocessing.Pool doing the work of fibra's benchmark
programs, with the flags and rows of benchmarks/README.md.

    /usr/bin/python3 benchmarks/peers/mp_peer.py {b1|b2|b3|b5|b6} [flags]

Standard library only (and NumPy for b6); run with Debian's /usr/bin/python3.
"""
import multiprocessing
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


class Executor:
    """multiprocessing.Pool as the three calls common's loops use."""

    def __init__(self, pool):
        self.pool = pool

    def map(self, fn, items, chunksize=None):
        return self.pool.map(fn, items, chunksize)

    def submit(self, fn, *args):
        return self.pool.apply_async(fn, args)

    def get(self, handle):
        return handle.get()


def with_pool(a, run):
    with multiprocessing.Pool(a.workers) as pool:
        run(Executor(pool), a)


def main():
    a = common.parse(sys.argv[1:])
    system = f"multiprocessing.Pool ({multiprocessing.get_start_method()})"
    if a.bench == "b1":
        common.header(system, f"{a.workers} workers, scale {a.scale:g} (tasks: {common.b1_counts(a)}), "
                              f"medians of {a.repeats} runs")
        with_pool(a, common.b1)
    elif a.bench == "b2":
        common.header(system, f"{a.workers} workers, medians of {a.repeats} runs")
        with_pool(a, common.b2)
    elif a.bench == "b6":
        common.header(system, f"{a.workers} workers, {a.bytes} bytes, medians of {a.repeats} trips")
        with_pool(a, common.b6)
    else:
        common.fail(f"{a.bench} is not written yet for multiprocessing")


if __name__ == "__main__":
    main()
