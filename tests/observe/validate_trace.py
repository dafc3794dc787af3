#!/usr/bin/env python3
"""Checks a Chrome trace written by `fibra trace` against the trace event format that Perfetto and
chrome://tracing read, and, given the event log it came from, that it holds one complete event per
attempt the log shows (counted here from the log itself, not by fibra's reader).

  validate_trace.py TRACE [--log events.jsonl] [--min-attempts N]

Exit status 0 when it holds; otherwise each problem on stderr (at most 20) and status 1.
"""
import argparse
import bisect
import json
import sys
from collections import defaultdict

problems = []


def problem(text):
    problems.append(text)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def attempts_in_log(path):
    """(segment, pool, chunk, attempt) of every attempt sent and not taken back before it ran."""
    sent, requeued = set(), set()
    segment = -1
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a last line cut by a killed driver
            if e.get("ev") == "log":
                segment += 1
            elif e.get("ev") in ("sent", "requeued"):
                k = (segment, e["pool"], e["chunk"], e["attempt"])
                (sent if e["ev"] == "sent" else requeued).add(k)
    return sent - requeued


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--log")
    ap.add_argument("--min-attempts", type=int, default=1)
    args = ap.parse_args()

    with open(args.trace, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        print("no traceEvents list", file=sys.stderr)
        return 1

    named_processes, named_threads = set(), set()
    slices = defaultdict(list)  # (pid, tid) -> [(ts, end, event)]
    asyncs = defaultdict(list)  # (cat, id) -> phases
    flow_starts, flow_ends = {}, []
    for e in events:
        ph = e.get("ph")
        if not isinstance(e.get("name"), str) or not isinstance(ph, str):
            problem(f"an event without a name or phase: {e}")
            continue
        for k in ("pid", "tid"):
            if k in e and not is_int(e[k]):
                problem(f"{k} is not an integer: {e}")
        if not is_int(e.get("pid")):
            problem(f"no integer pid: {e}")
            continue
        if ph == "M":
            if e["name"] == "process_name":
                named_processes.add(e["pid"])
            elif e["name"] == "thread_name":
                named_threads.add((e["pid"], e.get("tid")))
            continue
        if not is_number(e.get("ts")) or e["ts"] < 0:
            problem(f"no timestamp: {e}")
            continue
        if not is_int(e.get("tid")):
            problem(f"no integer tid: {e}")
            continue
        if ph == "X":
            if not is_number(e.get("dur")) or e["dur"] < 0:
                problem(f"a complete event without a duration: {e}")
                continue
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e))
        elif ph in ("b", "e"):
            asyncs[(e.get("cat"), json.dumps(e.get("id")), e["name"], e["pid"])].append((e["ts"], ph))
        elif ph == "s":
            if e.get("id") in flow_starts:
                problem(f"flow {e.get('id')} starts twice")
            flow_starts[e.get("id")] = e
        elif ph == "f":
            flow_ends.append(e)
        elif ph in ("C", "i", "I"):
            if ph == "C" and not all(is_number(v) for v in e.get("args", {}).values()):
                problem(f"a counter whose values are not numbers: {e}")
        else:
            problem(f"an unexpected phase {ph!r}: {e}")

    # Complete events nest on their thread: each one inside the one it starts in, or after it.
    for track, xs in slices.items():
        if track not in named_threads:
            problem(f"thread {track} has complete events but no thread_name")
        if track[0] not in named_processes:
            problem(f"process {track[0]} has complete events but no process_name")
        xs.sort(key=lambda x: (x[0], -(x[1] - x[0])))
        stack = []
        for ts, end, e in xs:
            while stack and stack[-1][1] <= ts:
                stack.pop()
            if stack and end > stack[-1][1]:
                problem(f"on {track}, {e['name']} [{ts}, {end}] overlaps [{stack[-1][0]}, {stack[-1][1]}]")
            stack.append((ts, end))

    # Async events: each begun one ends, no earlier than it began.
    for k, phases in asyncs.items():
        phases.sort()
        b = sum(1 for _, p in phases if p == "b")
        e = sum(1 for _, p in phases if p == "e")
        if b != e or phases[0][1] != "b":
            problem(f"async {k}: {b} begin(s), {e} end(s)")

    # Flows: each end has its start, no later than it, and both sit in a slice of their thread.
    starts = {track: [ts for ts, _, _ in xs] for track, xs in slices.items()}  # (sorted above)

    def enclosed(e):
        track = (e["pid"], e["tid"])
        xs = slices.get(track, [])
        i = bisect.bisect_right(starts.get(track, []), e["ts"]) - 1
        # The slice that starts last at or before it, or one of those just before (slices nest).
        return any(xs[k][0] <= e["ts"] <= xs[k][1] for k in range(i, max(-1, i - 64), -1))

    ends_per_id = defaultdict(int)
    for f in flow_ends:
        ends_per_id[f.get("id")] += 1
    for fid, n in ends_per_id.items():
        if n > 1:
            problem(f"flow {fid} ends {n} times (a flow ends at its first end: one id per arrow)")
    for f in flow_ends:
        s = flow_starts.get(f.get("id"))
        if s is None:
            problem(f"flow {f.get('id')} ends without a start")
            continue
        if s["ts"] > f["ts"]:
            problem(f"flow {f.get('id')} ends before it starts")
        if not enclosed(f) or not enclosed(s):
            problem(f"flow {f.get('id')} is not bound to slices at both ends")

    attempts = [x for xs in slices.values() for _, _, x in xs if x.get("cat") == "attempt"]
    if len(attempts) < args.min_attempts:
        problem(f"{len(attempts)} attempt(s), fewer than {args.min_attempts}")
    if args.log:
        expected = attempts_in_log(args.log)
        if len(attempts) != len(expected):
            problem(f"{len(attempts)} complete events of attempts, but the log shows {len(expected)} attempts")
        keys = [(a["args"].get("segment"), a["args"].get("pool"), a["args"].get("chunk"), a["args"].get("attempt"))
                for a in attempts]
        if len(set(keys)) != len(keys):
            problem("an attempt has two complete events")
        for k in sorted(expected - set(keys))[:5]:
            problem(f"attempt (segment, pool, chunk, attempt) {k} of the log has no complete event")
        for k in sorted(set(keys) - expected)[:5]:
            problem(f"complete event of attempt {k} that the log does not show")

    for p in problems[:20]:
        print(p, file=sys.stderr)
    if problems:
        print(f"validate_trace: {len(problems)} problem(s) in {args.trace}", file=sys.stderr)
        return 1
    print(f"validate_trace: {args.trace}: {len(events)} events, {len(attempts)} attempts, "
          f"{len(slices)} threads, {len(flow_ends)} flows: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
