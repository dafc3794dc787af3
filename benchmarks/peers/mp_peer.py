#!/usr/bin/python3
"""The multiprocessing peer: Python's multiprocessing.Pool doing the work of fibra's benchmark
programs, with the flags and rows of benchmarks/README.md.

    /usr/bin/python3 benchmarks/peers/mp_peer.py {b1|b2|b3|b5|b6|b8} [flags]

Standard library only (and NumPy for b6); run with Debian's /usr/bin/python3. b8 (queues, pipes,
processes) is this peer's alone: multiprocessing.Queue, SimpleQueue, Pipe and Process beside fibra's.

The pool's workers are this process's children (start method fork). Every pool is ended with a
bounded wait, and on SIGTERM, SIGINT or SIGHUP every descendant of this process is SIGKILLed by pid
before it exits (128 + the signal).
"""
import contextlib
import functools
import math
import multiprocessing
import multiprocessing.pool
import os
import queue
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time

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


# ---- ending processes ----


MAIN_PID = os.getpid()
POOLS = []  # the pools alive now
TMPDIRS = []  # the temporary folders made now (B3's markers)


def new_pool(n, **kwargs):
    pool = multiprocessing.Pool(n, **kwargs)
    POOLS.append(pool)
    return pool


def kill_descendants(bound=5.0):
    """SIGKILLs every live descendant of this process by pid until none is left twice in a row (at
    most `bound` seconds), then lets multiprocessing reap its children. Returns how many it
    signalled."""
    signalled = common.sigkill_descendants(bound)
    multiprocessing.active_children()  # reaps the Process objects of the dead workers
    return signalled


def stop_pool(pool, bound=10.0):
    """pool.terminate() with a bounded wait (it can block for ever on a queue lock that a killed
    worker held), then SIGKILL for any process of ours left. True if terminate() finished."""
    if pool in POOLS:
        POOLS.remove(pool)
    t = threading.Thread(target=pool.terminate, daemon=True)
    t.start()
    t.join(bound)
    if t.is_alive():
        print(f"peer: Pool.terminate() still blocked after {bound:g} s; killing the workers", file=sys.stderr)
    kill_descendants()
    return not t.is_alive()


def on_signal(signum, _frame):
    """Stops every pool's worker handler from starting new workers (it wakes when one dies), then
    kills them all."""
    if os.getpid() != MAIN_PID:  # in a worker: install_handlers gives them theirs back; a safety net
        os._exit(128 + signum)
    signal.signal(signum, signal.SIG_IGN)
    for pool in POOLS:
        pool._worker_handler._state = multiprocessing.pool.TERMINATE
    kill_descendants()
    for folder in TMPDIRS:
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(128 + signum)


def install_handlers():
    """on_signal for SIGTERM, SIGINT and SIGHUP in this process only: forked workers get the
    handlers back they had, as Pool.terminate() expects (SIGTERM ends a worker at once, even one
    waiting for a queue's lock; a Python handler could miss that signal and leave it waiting)."""
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    before = {s: signal.getsignal(s) for s in signals}

    def in_child():
        for s, h in before.items():
            signal.signal(s, h)
    os.register_at_fork(after_in_child=in_child)
    for s in signals:
        signal.signal(s, on_signal)


def with_pool(a, run):
    pool = new_pool(a.workers)
    try:
        run(Executor(pool), a)
    finally:
        stop_pool(pool)


# ---- b3 ----


def b3_run(a, fault, limit):
    """One unordered map of a.tasks b3 tasks on a fresh Pool, with `fault`, stopped if not done
    `limit` s after it started. Returns a dict: results, wall (None if stopped), fault_at and last_at
    (seconds from the start to the fault and to the last result), alive (workers alive at the end),
    held (the Pool's queue locks held when it was stopped), terminated (whether Pool.terminate()
    returned)."""
    tmp = tempfile.mkdtemp(prefix="mp-peer-b3-")
    TMPDIRS.append(tmp)
    marker = os.path.join(tmp, "segv")
    segv_at = a.tasks // 2 if fault == "segfault_once" else -1
    fn = functools.partial(common.b3_task, ms=a.task_ms, segv_at=segv_at, marker=marker)
    strike = a.tasks * 3 // 10 if fault == "executor_kill" else -1
    out = dict(results=[], wall=None, fault_at=None, last_at=0.0, alive=0, terminated=True, held=[])
    pool = new_pool(a.workers)
    try:
        t0, t0_clock = time.perf_counter(), time.time()
        it = pool.imap_unordered(fn, range(a.tasks))
        while True:
            try:
                r = it.next(timeout=max(0.001, t0 + limit - time.perf_counter()))
            except StopIteration:
                out["wall"] = time.perf_counter() - t0
                break
            except multiprocessing.TimeoutError:
                break
            out["results"].append(r)
            out["last_at"] = time.perf_counter() - t0
            if len(out["results"]) == strike:
                victim = r[1]
                if victim not in [p.pid for p in pool._pool] or victim == os.getpid():
                    common.fail(f"b3 {fault}: refusing to kill pid {victim} (not a worker of this pool)")
                os.kill(victim, signal.SIGKILL)
                out["fault_at"] = time.perf_counter() - t0
        if fault == "segfault_once" and os.path.exists(marker):
            out["fault_at"] = os.stat(marker).st_mtime - t0_clock
        out["alive"] = len(common.descendants())
        if out["wall"] is None:  # stopped: which of the Pool's queue locks is held now (by a dead worker?)
            out["held"] = [name for name, lock in (("task queue's read", pool._inqueue._rlock),
                                                   ("result queue's write", pool._outqueue._wlock))
                           if not (lock.acquire(False) and (lock.release() or True))]
    finally:
        out["terminated"] = stop_pool(pool)
        shutil.rmtree(tmp, ignore_errors=True)
        TMPDIRS.remove(tmp)
    if fault != "none" and out["fault_at"] is None:
        common.fail(f"b3 {fault}: the fault never happened")
    return out


def run_b3(a):
    known = ("none", "executor_kill", "segfault_once", "agent_kill")
    if any(f not in known for f in a.faults):
        common.fail(f"unknown fault in --faults (faults are {', '.join(known)})")
    ideal = math.ceil(a.tasks / a.workers) * a.task_ms / 1000.0
    common.header(f"multiprocessing.Pool ({multiprocessing.get_start_method()})",
                  f"{a.workers} workers, {a.tasks} tasks of {a.task_ms} ms, imap_unordered at its default "
                  f"chunksize (1), a fresh Pool per run, {a.repeats} repeats")
    common.note(f"executor_kill: SIGKILL of the worker that returned the latest result once {a.tasks * 3 // 10} "
                f"results are in; segfault_once: task {a.tasks // 2} segfaults its worker the first time it runs")
    if "agent_kill" in a.faults:
        common.note("no agent_kill rows: multiprocessing.Pool has no process supervising its workers "
                    "(the driver's own threads do)")
    faults = [f for f in a.faults if f != "agent_kill"]

    def run(f, limit):
        out = b3_run(a, f, limit)
        results, wall, fault_at = out["results"], out["wall"], out["fault_at"]
        if any(pid <= 0 for _i, pid in results):
            common.fail(f"b3 {f}: a result without its worker's pid")
        if wall is not None:
            return True, wall, results, ""
        if fault_at is None:
            return False, wall, results, (f"the map was not done {limit:.3g} s after it started; stopped "
                                          f"({len(results)} of {a.tasks} results in)")
        lost = common.b3_tally(results, a.tasks)[0]
        stall = "" if lost <= 1 else (
            f"; {lost - 1} more results never came"
            + (f" (the {' and '.join(out['held'])} lock held: the worker died holding it and every other "
               f"worker waits for it)" if out["held"] else "")
            + ("; Pool.terminate() blocked too" if not out["terminated"] else ""))
        return False, wall, results, (
            f"multiprocessing.Pool does not resubmit the task of a worker that died and waits for it forever "
            f"({out['alive']} of {a.workers} workers alive: it replaces the worker, not its task){stall}; stopped: "
            f"the map was not done {limit:.3g} s after it started ({len(results)} of {a.tasks} results in, the "
            f"last at {out['last_at']:.3g} s; the fault at {fault_at:.3g} s)")

    common.b3_repeat(a, faults, run, lambda f, base: max(60.0, 20 * ideal) if f == "none" else
                     max(10.0, 5 * (base if base is not None else 2 * ideal)))


# ---- b5 ----

B5_LIMIT = 300.0  # seconds for a pool to get all its workers running a task
_barrier = None


def _b5_init(barrier):
    global _barrier
    _barrier = barrier


def _b5_ready(_):
    """Waits until every worker of the pool runs this task (a worker that waits here takes no other
    task, so n of them run on n different workers), then returns its pid."""
    _barrier.wait(B5_LIMIT)
    return os.getpid()


def run_b5(a):
    if any(n < 1 for n in a.workers):
        common.fail("--workers must be positive")
    common.header(f"multiprocessing.Pool ({multiprocessing.get_start_method()})",
                  f"pools of {','.join(map(str, a.workers))} workers, idle {a.idle_seconds:g} s; startup: from "
                  f"Pool(n) to n tasks running at once on n workers (a multiprocessing.Barrier)")
    for n in a.workers:
        barrier = multiprocessing.Barrier(n)
        t0 = time.perf_counter()
        pool = new_pool(n, initializer=_b5_init, initargs=(barrier,))
        try:
            try:
                pids = pool.map_async(_b5_ready, range(n), chunksize=1).get(timeout=B5_LIMIT)
            except multiprocessing.TimeoutError:
                common.fail(f"b5: a Pool of {n} workers did not run {n} tasks at once in {B5_LIMIT:g} s")
            startup = time.perf_counter() - t0
            if len(set(pids)) != n or os.getpid() in pids:
                common.fail(f"b5: {n} tasks ran on {len(set(pids))} distinct workers")
            common.row("b5", f"startup_{n}_workers_s", startup, "s")
            common.b5_idle(n, a.idle_seconds)
        finally:
            stop_pool(pool)


# ---- b8 ----

B8_LIMIT = 300  # seconds: the longest any one measurement may wait (a stream, a loop of round trips)


def _b8_write(q, n, batch):
    """The writer Process: 0..n-1, one put each (batch 1) or in lists of `batch`."""
    signal.alarm(B8_LIMIT)  # every wait of a child bounded: SIGALRM ends it
    if batch <= 1:
        put = q.put
        for k in range(n):
            put(k)
    else:
        for k in range(0, n, batch):
            q.put(list(range(k, min(n, k + batch))))


def _b8_read(q, n, batched, report):
    """The reader Process: gets until n items are in, then reports (count, sum, items after its first
    get, seconds from its first get to its last)."""
    signal.alarm(B8_LIMIT)
    get, count, total = q.get, 0, 0
    if batched:
        items = get()
        first, first_count = time.perf_counter(), len(items)
        count, total = len(items), sum(items)
        while count < n:
            items = get()
            count += len(items)
            total += sum(items)
    else:
        total += get()
        first, first_count, count = time.perf_counter(), 1, 1
        while count < n:
            total += get()
            count += 1
    report.put((count, total, count - first_count, time.perf_counter() - first))


def _b8_echo(end, other):
    """The Pipe's echo: value + 1 until the driver closes its end."""
    signal.alarm(B8_LIMIT)
    other.close()  # the driver's end, inherited by fork: closed here so that its close ends the loop
    try:
        while True:
            end.send(end.recv() + 1)
    except EOFError:
        pass


def _b8_nothing():
    pass


def _b8_echo_blocks(end, other):
    other.close()
    try:
        while True:
            end.send_bytes(end.recv_bytes())
    except EOFError:
        pass


def _b8_block(nbytes):
    """nbytes bytes, byte k equal to k % 251 (as b8_queues.cpp makes its block)."""
    return (bytes(range(251)) * (nbytes // 251 + 1))[:nbytes]


def _b8_put_block(q, go, nbytes):
    block = _b8_block(nbytes)
    go.recv()
    q.put(block)


def b8_large(nbytes):
    """Seconds for one block of nbytes from the driver to a Process and back through a Pipe, and for
    one put by a Process into a Queue and the driver's get (from the driver's word to the Process,
    which had made the block already), as b8_queues.cpp's large_* rows."""
    block = _b8_block(nbytes)
    mine, theirs = multiprocessing.Pipe()
    echo = multiprocessing.Process(target=_b8_echo_blocks, args=(theirs, mine))
    with b8_bounded("large items"):
        echo.start()
        theirs.close()
        mine.send_bytes(b"warm")
        mine.recv_bytes()
        t = time.perf_counter()
        mine.send_bytes(block)
        back = mine.recv_bytes()
        pipe_s = time.perf_counter() - t
        mine.close()
        echo.join(30)
        if back != block:
            common.fail("b8: the pipe's echo of the large block was wrong")
        q = multiprocessing.Queue()
        go, their_go = multiprocessing.Pipe()
        writer = multiprocessing.Process(target=_b8_put_block, args=(q, their_go, nbytes))
        writer.start()
        time.sleep(0.5 + nbytes / 2e8)  # it makes its block first, as fibra's writer does before its recv
        go.send(1)
        t = time.perf_counter()
        got = q.get()
        queue_s = time.perf_counter() - t
        writer.join(30)
        if got != block or writer.exitcode != 0:
            common.fail("b8: the queue's large block was wrong")
    return pipe_s, queue_s


@contextlib.contextmanager
def b8_bounded(what):
    """A watchdog over one measurement: past B8_LIMIT s, every process of ours killed, exit 1."""
    timer = common.watchdog(B8_LIMIT, f"b8 {what}", kill_descendants)
    try:
        yield
    finally:
        timer.cancel()


def b8_stream(n, batch, simple=False):
    """Items per second from a writer Process to a reader Process through a multiprocessing.Queue
    (or SimpleQueue), checked (count and sum): from starting both to the reader's report, and as the
    reader saw them come, from its first get to its last (the queue's own rate)."""
    what = f"{'SimpleQueue' if simple else 'Queue'} of {n} items" + (f" in lists of {batch}" if batch > 1 else "")
    q = multiprocessing.SimpleQueue() if simple else multiprocessing.Queue(max(10_000, 10 * batch) // batch)
    report = multiprocessing.Queue()
    reader = multiprocessing.Process(target=_b8_read, args=(q, n, batch > 1, report))
    writer = multiprocessing.Process(target=_b8_write, args=(q, n, batch))
    deadline = time.monotonic() + B8_LIMIT
    t0 = time.perf_counter()
    reader.start()
    writer.start()
    while True:
        try:
            count, total, after_first, stream_s = report.get(timeout=0.2)
            break
        except queue.Empty:
            if writer.exitcode not in (None, 0):
                common.fail(f"b8 {what}: the writer ended with exit code {writer.exitcode}")
            if reader.exitcode is not None or time.monotonic() > deadline:
                try:
                    count, total, after_first, stream_s = report.get(timeout=1)
                    break
                except queue.Empty:
                    common.fail(f"b8 {what}: no report from the reader (exit code {reader.exitcode}) "
                                f"after {time.monotonic() - deadline + B8_LIMIT:.3g} s")
    s = time.perf_counter() - t0
    for p in (writer, reader):
        p.join(30)
        if p.exitcode != 0:
            common.fail(f"b8 {what}: a {'writer' if p is writer else 'reader'} ended with exit code {p.exitcode}")
    if count != n or total != n * (n - 1) // 2:
        common.fail(f"b8 {what}: the reader got {count} items summing to {total}, expected {n} and "
                    f"{n * (n - 1) // 2}")
    q.close()
    report.close()
    return n / s, (after_first / stream_s if stream_s > 0 else 0.0)


def b8_pipe(roundtrips):
    """The median round trip in us: the driver sends i, a Process echoes i + 1 (one warm-up trip)."""
    mine, theirs = multiprocessing.Pipe()
    echo = multiprocessing.Process(target=_b8_echo, args=(theirs, mine))
    echo.start()
    theirs.close()
    trips = []
    with b8_bounded("pipe round trips"):
        mine.send(-1)
        if mine.recv() != 0:
            common.fail("b8: the pipe's warm-up echo was wrong")
        for i in range(roundtrips):
            t = time.perf_counter()
            mine.send(i)
            v = mine.recv()
            trips.append(time.perf_counter() - t)
            if v != i + 1:
                common.fail(f"b8: the pipe's echo of {i} was {v}")
    mine.close()
    echo.join(30)
    if echo.exitcode != 0:
        common.fail(f"b8: the pipe's echo Process ended with exit code {echo.exitcode}")
    return statistics.median(trips) * 1e6


def b8_starts(ctx, n):
    """The median ms from creating a Process of context `ctx` running a no-op to its join."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        p = ctx.Process(target=_b8_nothing)
        p.start()
        p.join(B8_LIMIT)
        times.append(time.perf_counter() - t)
        if p.exitcode != 0:
            common.fail(f"b8: a no-op Process ({ctx.get_start_method()}) ended with exit code {p.exitcode}")
    return statistics.median(times) * 1e3


def b8_async(pool, roundtrips):
    trips = []
    with b8_bounded("apply_async round trips"):
        for i in range(roundtrips):
            t = time.perf_counter()
            v = pool.apply_async(common.noop, (i,)).get()
            trips.append(time.perf_counter() - t)
            if v != i:
                common.fail(f"b8: apply_async(noop, {i}) returned {v}")
    return statistics.median(trips) * 1e6


def run_b8(a):
    common.header(f"multiprocessing ({multiprocessing.get_start_method()})",
                  f"{a.workers} workers, {a.items} items (lists of {a.batch}), {a.roundtrips} pipe round trips, "
                  f"{a.starts} process starts, medians of {a.repeats} runs")
    common.note(f"queues: multiprocessing.Queue of ints (maxsize {max(10_000, 10 * a.batch)} items; in lists: "
                f"{max(10_000, 10 * a.batch) // a.batch} lists), one writer "
                f"and one reader Process; batches: {10 * a.items} items as lists of {a.batch}; extra rows of this "
                f"peer alone: the same with SimpleQueue, and process starts with the 'spawn' context")
    spawn = multiprocessing.get_context("spawn")
    fork = multiprocessing.get_context("fork")
    pool = new_pool(a.workers)
    try:
        if pool.map(common.noop, range(4 * a.workers)) != list(range(4 * a.workers)):  # every worker up
            common.fail("b8: the warm-up map returned wrong results")
        got = {}
        for _ in range(a.repeats):
            batched = []  # (whole, stream) of the one batched run of this repeat
            figures = [("queue_single_items_per_s", lambda: b8_stream(a.items, 1)[0], "items/s"),
                       ("queue_batch_items_per_s",
                        lambda: batched.append(b8_stream(10 * a.items, a.batch)) or batched[-1][0], "items/s"),
                       ("queue_batch_stream_items_per_s", lambda: batched[-1][1], "items/s"),
                       ("pipe_roundtrip_us", lambda: b8_pipe(a.roundtrips), "us"),
                       ("process_start_join_ms", lambda: b8_starts(fork, a.starts), "ms"),
                       ("apply_async_roundtrip_us", lambda: b8_async(pool, a.roundtrips), "us"),
                       ("simplequeue_single_items_per_s", lambda: b8_stream(a.items, 1, simple=True)[0], "items/s"),
                       ("process_start_join_spawn_ms", lambda: b8_starts(spawn, a.starts), "ms")]
            if a.large_mb > 0:
                large = []
                figures += [("large_pipe_roundtrip_s", lambda: large.append(b8_large(a.large_mb * 1_000_000))
                             or large[-1][0], "s"),
                            ("large_queue_put_get_s", lambda: large[-1][1], "s")]
            for metric, measure, unit in figures:
                got.setdefault(metric, ([], unit))[0].append(measure())
        # Its batches are lists, one queue item each: the same figure for fibra's vectors of 1,000.
        got["queue_list_items_per_s"] = got["queue_batch_items_per_s"]
        got["queue_list_stream_items_per_s"] = got["queue_batch_stream_items_per_s"]
        for metric, (values, unit) in got.items():
            common.row("b8", metric, statistics.median(values), unit)
    finally:
        stop_pool(pool)  # and every other process of ours (the spawn context's resource tracker)


def main():
    install_handlers()
    a = common.parse(sys.argv[1:], benches=list(common.DEFAULTS))
    system = f"multiprocessing.Pool ({multiprocessing.get_start_method()})"
    if a.bench == "b1":
        common.header(system, f"{a.workers} workers, scale {a.scale:g} (tasks: {common.b1_counts(a)}), "
                              f"medians of {a.repeats} runs")
        with_pool(a, common.b1)
    elif a.bench == "b2":
        common.header(system, f"{a.workers} workers, medians of {a.repeats} runs")
        with_pool(a, common.b2)
    elif a.bench == "b3":
        run_b3(a)
    elif a.bench == "b5":
        run_b5(a)
    elif a.bench == "b6":
        common.header(system, f"{a.workers} workers, {a.bytes} bytes, medians of {a.repeats} trips")
        with_pool(a, common.b6)
    elif a.bench == "b8":
        run_b8(a)


if __name__ == "__main__":
    main()
