#!/usr/bin/python3
"""Where a round trip's time goes: reads the trace.<pid> files that FIBRA_TRACE=<folder> makes every
fibra process write (src/common/trace.hpp) and prints, for each hop between two points of the data path,
the median and the 90th percentile over the chunks that passed both.

    FIBRA_TRACE=/tmp/t build/benchmarks/b2_throughput ... && benchmarks/trace_breakdown.py /tmp/t
"""
import glob
import os
import statistics
import sys

NAMES = ["submitted", "dispatched", "agent_received", "agent_forwarded", "executor_read", "executor_ran",
         "executor_sent", "agent_read", "agent_sent", "driver_received", "delivered", "taken"]
TAKEN = NAMES.index("taken")


def load(folder):
    events = {}  # chunk -> {point: ns} (the last passage of each point: retries overwrite)
    taken = []
    for path in glob.glob(os.path.join(folder, "trace.*")):
        with open(path) as f:
            for line in f:
                p, chunk, ns = (int(x) for x in line.split())
                if p == TAKEN:
                    taken.append(ns)
                else:
                    events.setdefault(chunk, {})[p] = ns
    # "taken" carries no chunk id: pair each with the latest delivery before it.
    taken.sort()
    delivered = sorted((e[NAMES.index("delivered")], c) for c, e in events.items() if NAMES.index("delivered") in e)
    j = 0
    for t in taken:
        while j + 1 < len(delivered) and delivered[j + 1][0] <= t:
            j += 1
        if delivered and delivered[j][0] <= t:
            events[delivered[j][1]].setdefault(TAKEN, t)
    return events


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    events = load(sys.argv[1])
    print(f"{'hop':45} {'median us':>10} {'p90 us':>10} {'chunks':>7}")
    # Hops between the points a chunk passed, in order: a batch through an executor's lane (the
    # driver on its host) passes no agent point.
    hops = {}
    for e in events.values():
        seen = sorted(e)
        for a, b in zip(seen, seen[1:]):
            hops.setdefault((a, b), []).append((e[b] - e[a]) / 1e3)
    for (a, b), d in sorted(hops.items()):
        if len(d) * 20 >= len(events):  # the path most chunks took, not the odd retry
            print(f"{NAMES[a] + ' -> ' + NAMES[b]:45} {statistics.median(d):10.1f} {pct(d, 0.9):10.1f} {len(d):7}")
    whole = [(e[TAKEN] - e[0]) / 1e3 for e in events.values() if 0 in e and TAKEN in e]
    if whole:
        print(f"{'submitted -> taken (whole round trip)':45} {statistics.median(whole):10.1f} {pct(whole, 0.9):10.1f} {len(whole):7}")


if __name__ == "__main__":
    main()
