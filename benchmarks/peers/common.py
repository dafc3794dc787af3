"""What every peer program shares: flags, rows, the task functions and the timed loops that do not
depend on the executor. The contract (flags, metric names) is benchmarks/README.md.

A peer adapts its executor to three calls and hands it to the loops here:

    map(fn, items, chunksize=None) -> list    results in order; chunksize None: the system's default
    submit(fn, *args) -> handle               starts one task
    get(handle) -> value                      waits for its result

Task functions live in this module so that every system's workers import them by name.
"""
import argparse
import math
import os
import platform
import signal
import statistics
import sys
import time

# ---- task functions (module level: pickled by reference) ----


def sleep_us(us):
    """Sleeps `us` microseconds and returns it (B1)."""
    time.sleep(us / 1e6)
    return us


def noop(x):
    """Returns its argument (B2)."""
    return x


def echo(a):
    """Returns its argument (B6)."""
    return a


def b3_task(i, ms, segv_at=-1, marker=""):
    """Sleeps `ms` and returns (i, pid). The task `segv_at` segfaults its process the first time it
    runs (the first to create `marker` does it), as fibra's B3 does."""
    if i == segv_at and marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(10)  # the signal is on its way
        except FileExistsError:
            pass
    time.sleep(ms / 1000.0)
    return (i, os.getpid())


# ---- flags and rows ----

DEFAULTS = {
    "b1": dict(workers=5, durations_ms="1,10,100,1000", modes="map,seq", repeats=1, scale=1.0, mixed=1),
    "b2": dict(workers=2, map_tasks=10_000_000, async_tasks=200_000, roundtrips=2000, repeats=1,
               chunksizes="1000,10000,100000"),
    "b3": dict(workers=4, tasks=4000, task_ms=5, repeats=1, faults="none,executor_kill,segfault_once,agent_kill"),
    "b5": dict(workers="1,4,16,64", idle_seconds=10),
    "b6": dict(bytes=64 * 1024 * 1024, repeats=5, workers=1),
    "b8": dict(workers=2, items=200_000, batch=1000, roundtrips=2000, starts=20, repeats=1, large_mb=100),
}
# The benches every peer has; b8 (queues, pipes, processes) is multiprocessing's only (mp_peer.py).
EVERY_PEER = ["b1", "b2", "b3", "b5", "b6"]


def fail(what):
    """A wrong result or bad flags: a message and exit status 1, never a row."""
    print(f"peer: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def parse(argv, extra=None, benches=None):
    """Parses `<bench> [flags]` with the flags of benchmarks/README.md; returns the namespace with
    `bench` set and comma lists split. `extra` is {bench: {flag: default}} a peer adds; `benches` the
    benches the peer has (default EVERY_PEER)."""
    benches = benches or EVERY_PEER
    if not argv or argv[0] not in benches:
        fail(f"usage: {os.path.basename(sys.argv[0])} {{{'|'.join(benches)}}} [flags] (see benchmarks/README.md)")
    bench = argv[0]
    p = argparse.ArgumentParser(prog=f"{os.path.basename(sys.argv[0])} {bench}")
    for k, v in {**DEFAULTS[bench], **(extra or {}).get(bench, {})}.items():
        p.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    a = p.parse_args(argv[1:])
    a.bench = bench
    if bench == "b1":
        a.durations = [float(d) for d in a.durations_ms.split(",") if d]
        a.modes = [m for m in a.modes.split(",") if m]
        if any(m not in ("map", "seq") for m in a.modes):
            fail("unknown mode (modes are map and seq)")
        if any(d <= 0 for d in a.durations) or a.scale <= 0:
            fail("durations and --scale must be positive")
    if bench == "b2":
        a.chunksizes = [int(c) for c in a.chunksizes.split(",") if c]
    if bench == "b3":
        a.faults = [f for f in a.faults.split(",") if f]
    if bench == "b5":
        a.workers = [int(n) for n in a.workers.split(",") if n]
    if bench == "b6" and (a.bytes <= 0 or a.bytes % 8):
        fail("--bytes must be a positive multiple of 8")
    if bench == "b8" and min(a.workers, a.items, a.batch, a.roundtrips, a.starts) < 1:
        fail("--workers, --items, --batch, --roundtrips and --starts must be positive")
    if getattr(a, "repeats", 1) < 1:
        fail("--repeats must be at least 1")
    return a


def memory_gib():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30


def header(system, details):
    """The `#` line naming what ran, then the CSV header."""
    print(f"# {system}, python {platform.python_version()}, {os.cpu_count()} hardware threads, "
          f"{memory_gib():.0f} GiB, {details}")
    print("benchmark,metric,value,unit", flush=True)


def note(text):
    """A `#` line: something capped, skipped or impossible."""
    print(f"# {text}", flush=True)


def row(bench, metric, value, unit):
    """One CSV row; floats to 6 significant digits (whole numbers from 100,000 up), nan as nan."""
    if isinstance(value, float) and math.isfinite(value):
        text = f"{value:.0f}" if abs(value) >= 1e5 else f"{value:.6g}"
    else:
        text = str(value)
    print(f"{bench},{metric},{text},{unit}", flush=True)


def size_name(nbytes):
    return f"{nbytes // 2**20}mib" if nbytes % 2**20 == 0 else f"{nbytes}b"


# ---- B1 ----


def b1_mixed_tasks(workers, scale):
    """The mixed series' durations in microseconds: 90% of 2 ms, 9% of 40 ms, 1% of 400 ms (a mean
    of 9.4 ms), drawn by SplitMix64 from each task's index (the same as b1_overhead.cpp)."""
    m = (1 << 64) - 1
    out = []
    for i in range(max(1, round(workers * scale * 1000.0 / 9.4))):
        z = (i + 0x9E3779B97F4A7C15) & m
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        z ^= z >> 31
        u = z % 100
        out.append(400000 if u == 0 else 40000 if u < 10 else 2000)
    return out


def b1_task_count(workers, scale, dur_ms):
    return max(1, round(workers * scale * 1000.0 / dur_ms))


def b1(ex, a):
    """B1 on executor `ex` with a.workers workers: warm-up, then the series repeat by repeat."""
    def run(mode, tasks, series):
        t = time.perf_counter()
        if mode == "map":
            out = ex.map(sleep_us, tasks)
        else:
            out = []
            for i in range(0, len(tasks), a.workers):
                handles = [ex.submit(sleep_us, x) for x in tasks[i:i + a.workers]]
                out.extend(ex.get(h) for h in handles)
        s = time.perf_counter() - t
        if list(out) != tasks:
            fail(f"b1 {series} returned wrong results")
        return s

    warm = [1000] * (a.workers * 4)
    run("map", warm, "warm-up map")
    run("seq", warm, "warm-up seq")
    wall = {}
    mixed = b1_mixed_tasks(a.workers, a.scale) if a.mixed else []
    for _ in range(a.repeats):
        for d in a.durations:
            tasks = [round(d * 1000)] * b1_task_count(a.workers, a.scale, d)
            for m in a.modes:
                wall.setdefault((m, d), []).append(run(m, tasks, f"{m}_{d:g}ms"))
        for m in a.modes if mixed else []:
            wall.setdefault((m, "mixed"), []).append(run(m, mixed, f"{m}_mixed"))
    for d in a.durations:
        ideal = math.ceil(b1_task_count(a.workers, a.scale, d) / a.workers) * d / 1000.0
        for m in a.modes:
            w = statistics.median(wall[(m, d)])
            row("b1", f"{m}_{d:g}ms_wall", w, "s")
            row("b1", f"{m}_{d:g}ms_ratio", w / ideal, "x")
    if mixed:
        bound = max(sum(mixed) / 1e6 / a.workers, max(mixed) / 1e6)
        for m in a.modes:
            w = statistics.median(wall[(m, "mixed")])
            row("b1", f"{m}_mixed_wall", w, "s")
            row("b1", f"{m}_mixed_ratio", w / bound, "x")


def b1_counts(a):
    counts = ", ".join(f"{b1_task_count(a.workers, a.scale, d)} x {d:g}ms" for d in a.durations)
    return counts + (f", {len(b1_mixed_tasks(a.workers, a.scale))} mixed (2/40/400 ms)" if a.mixed else "")


# ---- B2 ----


def b2(ex, a, map_tasks=None, async_tasks=None, roundtrips=None):
    """B2 on `ex`. The counts default to the flags; a peer whose per-task cost would make them take
    minutes passes smaller ones (and says so with note())."""
    map_tasks = map_tasks or a.map_tasks
    async_tasks = async_tasks or a.async_tasks
    roundtrips = roundtrips or a.roundtrips

    def timed_map(n, chunksize):
        items = list(range(n))
        t = time.perf_counter()
        out = ex.map(noop, items, chunksize)
        s = time.perf_counter() - t
        if list(out) != items:
            fail(f"b2 map (chunksize {chunksize}) returned wrong results")
        return n / s

    ex.map(noop, list(range(a.workers * 4)))  # warm-up
    default_rate, best_rate, best_chunk, async_rate, rtt = [], [], [], [], []
    for _ in range(a.repeats):
        default_rate.append(timed_map(map_tasks, None))
        tried = [(timed_map(a.map_tasks, c), c) for c in a.chunksizes]
        rate, chunk = max(tried + [(default_rate[-1], 0)])
        best_rate.append(rate)
        best_chunk.append(chunk)

        t = time.perf_counter()
        handles = [ex.submit(noop, i) for i in range(async_tasks)]
        out = [ex.get(h) for h in handles]
        async_rate.append(async_tasks / (time.perf_counter() - t))
        if out != list(range(async_tasks)):
            fail("b2 submitted no-ops returned wrong results")

        trips = []
        for i in range(roundtrips):
            t = time.perf_counter()
            v = ex.get(ex.submit(noop, i))
            trips.append(time.perf_counter() - t)
            if v != i:
                fail("b2 round trip returned a wrong result")
        rtt.append(statistics.median(trips) * 1e6)
    row("b2", "map_noop_tasks_per_s", statistics.median(default_rate), "tasks/s")
    row("b2", "map_noop_best_tasks_per_s", statistics.median(best_rate), "tasks/s")
    row("b2", "map_noop_best_chunksize", best_chunk[best_rate.index(max(best_rate))], "tasks")
    row("b2", "apply_async_noop_tasks_per_s", statistics.median(async_rate), "tasks/s")
    row("b2", "roundtrip_us", statistics.median(rtt), "us")


# ---- B3 ----


def b3_tally(results, tasks):
    """(lost, duplicated, wrong) of a list of (i, pid) results for inputs 0..tasks-1."""
    seen = {}
    for i, _pid in results:
        seen[i] = seen.get(i, 0) + 1
    lost = sum(1 for i in range(tasks) if i not in seen)
    dup = sum(c - 1 for c in seen.values())
    wrong = sum(1 for i in seen if not 0 <= i < tasks)
    return lost, dup, wrong


def b3_rows(fault, recovered, wall=math.nan, base=math.nan, lost=math.nan, dup=math.nan):
    row("b3", f"{fault}_recovered", 1 if recovered else 0, "bool")
    row("b3", f"{fault}_wall_s", wall if recovered else math.nan, "s")
    row("b3", f"{fault}_excess_s", wall - base if recovered else math.nan, "s")
    row("b3", f"{fault}_lost", lost, "results")
    row("b3", f"{fault}_duplicated", dup, "results")


def b3_report(fault, runs):
    """The rows of one fault over the repeats. `runs` holds (recovered, wall, excess, lost, dup) per
    repeat (excess nan when that repeat's run without a fault did not finish): recovered only if
    every repeat was; wall and excess are medians, lost and duplicated totals."""
    if runs and all(r[0] for r in runs):
        wall = statistics.median(r[1] for r in runs)
        excess = [r[2] for r in runs if math.isfinite(r[2])]
        excess = statistics.median(excess) if excess else math.nan
        b3_rows(fault, True, wall, wall - excess, sum(r[3] for r in runs), sum(r[4] for r in runs))
    else:
        b3_rows(fault, False, lost=sum(r[3] for r in runs), dup=sum(r[4] for r in runs))


def b3_repeat(a, faults, run, bound):
    """Runs every fault of `faults` in turn, `a.repeats` times, through run(fault, bound_s) ->
    (finished, wall, results, why) on a fresh cluster each (results None: the run never reported
    them), with the time limit bound(fault, wall of the repeat's run without a fault, or None);
    then prints each fault's rows and a note per repeat that did not recover."""
    outcomes = {f: [] for f in faults}
    for _ in range(a.repeats):
        base = None
        for f in faults:
            ok, wall, results, why = run(f, bound(f, base))
            lost, dup, wrong = b3_tally(results, a.tasks) if results is not None else (math.nan, math.nan, 0)
            if wrong:
                fail(f"b3 {f}: {wrong} results for inputs that were not sent")
            if f == "none":
                base = wall if ok and not lost and not dup else None
            outcomes[f].append((ok and not lost and not dup, wall, base, lost, dup, why))
            print(f"peer: b3 {f}: {'no' if results is None else len(results)} results, wall "
                  f"{f'{wall:.3f} s' if ok else 'stopped'}, lost {lost}, duplicated {dup}", file=sys.stderr, flush=True)
    for f in faults:
        runs = outcomes[f]
        for k, (ok, wall, base, lost, dup, why) in enumerate(runs):
            if not ok:
                note(f"{f}, repeat {k + 1}: not recovered: {why or f'{lost} lost, {dup} duplicated'}")
        b3_report(f, [(ok, wall, wall - base if ok and base is not None else math.nan, lost, dup)
                      for ok, wall, base, lost, dup, _why in runs])


# ---- B5 ----


def proc_table():
    """{pid: (ppid, state, cpu seconds so far, start time in ticks)} of every process now."""
    table, tick = {}, os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(name)] = (int(fields[1]), fields[0], (int(fields[11]) + int(fields[12])) / tick, int(fields[19]))
    return table


def descendants(root=None, table=None):
    """The pids of the processes descended from `root` (this process) that are alive now (zombies
    left out), from `table` (proc_table()) or a fresh look at /proc."""
    root = root or os.getpid()
    table = table if table is not None else proc_table()
    out = []
    for pid, (ppid, state, _cpu, _start) in table.items():
        p = ppid
        while p > 1 and p != root:
            p = table[p][0] if p in table else 0
        if p == root and pid != root and state not in ("Z", "X"):
            out.append(pid)
    return out


def sigkill_descendants(bound, pause=0.02, reap=None):
    """SIGKILLs every live descendant of this process by pid until none is seen twice in a row (at
    most `bound` seconds), calling `reap()` (if given) before each look. Returns how many it
    signalled."""
    deadline, signalled, calm = time.monotonic() + bound, set(), 0
    while time.monotonic() < deadline:
        if reap:
            reap()
        left = descendants()
        calm = 0 if left else calm + 1
        if calm == 2:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                signalled.add(pid)
            except OSError:
                pass
        time.sleep(pause)
    return len(signalled)


def tree_cpu_seconds(root=None):
    """CPU seconds (user + system) used so far by `root` (this process) and all its descendants
    alive now, and how many processes that is."""
    root = root or os.getpid()
    table = proc_table()
    procs = [root] + descendants(root, table)
    return sum(table[p][2] for p in procs if p in table), len(procs)


def b5_idle(n, seconds):
    """Measures and prints the idle CPU of this process tree over `seconds` (after 1 s of calm)."""
    if seconds <= 0:
        return
    time.sleep(1)
    before, _ = tree_cpu_seconds()
    time.sleep(seconds)
    after, procs = tree_cpu_seconds()
    note(f"idle {n} workers: {procs} processes over {seconds} s")
    row("b5", f"idle_{n}_workers_cpu_percent", 100.0 * (after - before) / seconds, "%")


# ---- B6 ----


def b6(ex, a):
    """B6 on `ex`: one warm-up trip, then a.repeats timed trips of a float64 array, each checked."""
    import numpy
    v = numpy.arange(a.bytes // 8, dtype=numpy.float64) * 0.5
    trips = []
    for k in range(a.repeats + 1):
        t = time.perf_counter()
        back = ex.get(ex.submit(echo, v))
        s = time.perf_counter() - t
        if not (isinstance(back, numpy.ndarray) and back.dtype == v.dtype and numpy.array_equal(back, v)):
            fail("b6 echo returned an array that differs from the one sent")
        if k:
            trips.append(s)
    med = statistics.median(trips)
    name = size_name(a.bytes)
    row("b6", f"payload_{name}_roundtrip_s", med, "s")
    row("b6", f"payload_{name}_bandwidth", 2 * a.bytes / 2**20 / med, "MiB/s")


# ---- helpers for peers that run clusters of processes (Dask, IPyParallel) ----


def map_chunk(fn, items):
    """Applies `fn` to every item of one chunk (the task of a chunked map in a system whose map has
    no chunk size)."""
    return [fn(x) for x in items]


def start_times(pids):
    """{pid: start time} of those of `pids` alive now (zombies left out): with end_processes(),
    a process is signalled only if it is still the one seen, not a new one that reuses its pid."""
    out = {}
    for pid in pids:
        t = _start_time(pid)
        if t is not None:
            out[pid] = t
    return out


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(procs):
    """Those of `procs` ({pid: start time}) still running."""
    return {p: t for p, t in procs.items() if _start_time(p) == t}


def end_processes(procs, grace=2.0):
    """SIGTERM to the processes `procs` ({pid: start time}) still running, then SIGKILL to those
    still running after `grace` seconds. Returns the pids it signalled."""
    procs = alive(procs)
    for pid in procs:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = alive(procs)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2
    while alive(left) and time.monotonic() < deadline:
        time.sleep(0.05)
    return sorted(procs)


def end_descendants(grace=2.0, also=None):
    """Ends every process descended from this one (end_processes), and those of `also` ({pid: start
    time}: processes of this program that may have been reparented already), then any that appeared
    meanwhile (a supervisor restarting a worker). The descendants are collected before any is
    signalled, so that a process whose parent ends first (and that is reparented) is ended too.
    Returns the pids it signalled."""
    procs = start_times(descendants())
    procs.update(alive(also or {}))
    signalled = end_processes(procs, grace)
    for _ in range(3):
        new = start_times(descendants())
        if not new:
            break
        signalled += end_processes(new, 0.2)
    return sorted(set(signalled))


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def on_termination(cleanup):
    """On SIGTERM, SIGINT or SIGHUP: runs `cleanup()` (which should end the system's processes
    quickly, e.g. with end_descendants), then exits with 128 + the signal's number."""
    def handler(signum, _frame):
        signal.signal(signum, signal.SIG_IGN)
        print(f"peer: signal {signum}: ending the system's processes", file=sys.stderr, flush=True)
        try:
            cleanup()
        finally:
            os._exit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, handler)


def watchdog(seconds, what, cleanup):
    """A started daemon timer: after `seconds`, says on stderr that `what` took too long, runs
    `cleanup()` and exits with status 1. Cancel it with .cancel()."""
    import threading

    def expire():
        print(f"peer: {what} took more than {seconds:g} s; giving up", file=sys.stderr, flush=True)
        try:
            cleanup()
        finally:
            os._exit(1)
    t = threading.Timer(seconds, expire)
    t.daemon = True
    t.start()
    return t


class Opaque:
    """A chunk of items (or of results) carried as one object. Dask walks the Python lists and
    tuples it finds in a task's arguments and results item by item (about 20 us per item here);
    inside an Opaque a chunk is pickled in one piece, as multiprocessing sends its chunks."""

    def __init__(self, items):
        self.items = items


def map_opaque_chunk(fn, chunk):
    """map_chunk for a chunk carried in an Opaque: returns the results in an Opaque."""
    return Opaque([fn(x) for x in chunk.items])
