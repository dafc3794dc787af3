#!/usr/bin/python3
"""The mpi4py.futures peer: mpi4py.futures.MPIPoolExecutor(max_workers=N) doing the work of fibra's
benchmark programs, with the flags and rows of benchmarks/README.md.

    /usr/bin/python3 benchmarks/peers/mpi4py_peer.py {b1|b2|b3|b5|b6} [flags]

Debian's python3-mpi4py (3.1) on Debian's Open MPI; run with Debian's /usr/bin/python3. Run on its
own (no mpirun): the driver is an MPI singleton, which starts an `orted` daemon (in a session of its
own) that MPI_Comm_spawn asks for the workers (`python3 -m mpi4py.futures.server`, children of orted).

What the calls of common's loops are here:
    map(fn, items, k)    list(executor.map(fn, items, chunksize=k or 1)); 1 is MPIPoolExecutor's default
    submit(fn, *args)    executor.submit(fn, *args)
    get(future)          future.result()

Processes. This program (the supervisor) imports no MPI: it makes itself the child subreaper
(prctl PR_SET_CHILD_SUBREAPER), so that orted and the workers stay its descendants even when the
driver ends, and runs the benchmark in a child process of itself (the driver). When the driver ends,
or after a generous time limit, or on SIGTERM/SIGINT/SIGHUP, it waits a little for orted and the
workers to end by themselves (orted ends its job when the driver's end closes a pipe) and SIGKILLs
by pid whatever is left among its descendants. B3 runs each fault in a driver of its own: a worker
that dies makes Open MPI abort the spawned job and leaves the driver waiting for ever.
"""
import os

# Open MPI as root, without epoll (this machine's libevent), and more processes than cores (B5
# oversubscribes). The suite sets these too; set here before anything imports MPI.
for _k, _v in (("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
               ("EVENT_NOEPOLL", "1"), ("OMPI_MCA_rmaps_base_oversubscribe", "1")):
    os.environ.setdefault(_k, _v)

import ctypes  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Workers import this file again (as __worker__, mpi4py.futures' way to find functions defined in
# the main script): nothing above may have side effects beyond the environment and the imports.

TMP_ENV = "MPI4PY_PEER_TMP"  # the supervisor's temporary folder, where the driver makes its files
CHILD = "--mpi4py-peer-driver"  # hidden first argument: run as the driver (a child of the supervisor)
B3_EXTRA = {"b3": {"case": "", "limit_s": 0.0, "out": ""}}  # the driver's flags for one B3 fault
# b2 counts here (see run_b2): mpi4py.futures pays a future and an MPI message per task at chunk
# size 1, a few thousand tasks per second.
B2_CAPS = dict(map_tasks=20_000, async_tasks=20_000, roundtrips=2000)


def system_name():
    import mpi4py
    return f"mpi4py.futures.MPIPoolExecutor (mpi4py {mpi4py.__version__})"


# ---- processes (supervisor side) ----


def reap_zombie_children():
    """Reaps this process's children that have ended (orted and workers reparented to the
    subreaper end up here). Only once no subprocess.Popen of ours still needs its status."""
    me = os.getpid()
    for pid, (ppid, state, _cpu, _start) in common.proc_table().items():
        if ppid == me and state in ("Z", "X"):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def end_descendants(grace):
    """Waits up to `grace` seconds for every descendant to end by itself, then SIGKILLs by pid those
    left until none is (bounded: 10 s more). Returns the number of processes it killed."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and common.descendants():
        reap_zombie_children()
        time.sleep(0.05)
    killed = common.sigkill_descendants(10, pause=0.05, reap=reap_zombie_children)
    reap_zombie_children()
    return killed


def remove_tmp():
    import shutil
    if os.environ.get(TMP_ENV):
        shutil.rmtree(os.environ[TMP_ENV], ignore_errors=True)


def on_signal(signum, _frame):
    signal.signal(signum, signal.SIG_IGN)
    print(f"peer: signal {signum}: killing the driver, orted and the workers", file=sys.stderr, flush=True)
    end_descendants(0)
    remove_tmp()
    os._exit(128 + signum)


def become_supervisor():
    """Child subreaper (orphans of our descendants are reparented to us, not to init), signal
    handlers that end every descendant, and a temporary folder for the drivers (removed at exit)."""
    import atexit
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        common.fail(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    os.environ[TMP_ENV] = tempfile.mkdtemp(prefix="mpi4py-peer-")
    atexit.register(remove_tmp)


def run_driver(argv, limit, what, stdout=None):
    """Runs this program as the driver with `argv`, at most `limit` seconds, then ends every process
    left. Returns the driver's exit status, or None if it was stopped at the limit."""
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), CHILD] + argv, stdout=stdout)
    try:
        rc = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"peer: {what} took more than {limit:g} s; killing it", file=sys.stderr, flush=True)
        proc.kill()
        proc.wait()
        rc = None
    killed = end_descendants(0 if rc is None else 5)
    if killed:
        print(f"peer: {what}: killed {killed} processes left (orted, workers)", file=sys.stderr, flush=True)
    return rc


# ---- the driver ----


class Executor:
    """MPIPoolExecutor as the three calls common's loops use."""

    def __init__(self, ex):
        self.ex = ex

    def map(self, fn, items, chunksize=None):
        return list(self.ex.map(fn, items, chunksize=chunksize or 1))

    def submit(self, fn, *args):
        return self.ex.submit(fn, *args)

    def get(self, future):
        return future.result()


def mpi_note():
    from mpi4py import MPI
    levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
              MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    return (f"MPI library {MPI.Get_library_version().split(',')[0].strip()}, thread level "
            f"{levels.get(MPI.Query_thread(), '?')}")


def is_worker(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"mpi4py.futures.server" in f.read()
    except OSError:
        return False


def start(n):
    """An MPIPoolExecutor of n workers, booted (its n workers spawned and connected)."""
    from mpi4py.futures import MPIPoolExecutor
    ex = MPIPoolExecutor(max_workers=n)
    ex.bootup(wait=True)
    if ex._max_workers != n:
        common.fail(f"MPIPoolExecutor(max_workers={n}) spawned {ex._max_workers} workers")
    return ex


def shut(ex, bound=60.0):
    """executor.shutdown(wait=True), at most `bound` seconds (then the driver ends and the
    supervisor kills what is left)."""
    t = threading.Thread(target=ex.shutdown, daemon=True)
    t.start()
    t.join(bound)
    if t.is_alive():
        print(f"peer: MPIPoolExecutor.shutdown() still blocked after {bound:g} s; leaving it", file=sys.stderr,
              flush=True)
        sys.stdout.flush()
        os._exit(1)


def with_executor(a, run):
    ex = start(a.workers)
    try:
        run(Executor(ex), a)
    finally:
        shut(ex)


def driver_b2(ex, a):
    counts = {k: min(getattr(a, k), cap) for k, cap in B2_CAPS.items()}
    common.note(f"{counts['map_tasks']} tasks for map at the default chunk size (1), {counts['async_tasks']} for "
                f"apply_async, {counts['roundtrips']} round trips; {a.map_tasks} at each of the chunk sizes "
                f"{','.join(map(str, a.chunksizes))}")
    common.b2(ex, a, **counts)


def b5_ready(folder, n, _i):
    """B5's barrier task: marks that this process runs a task, waits until n processes did (a worker
    runs one task at a time: n tasks waiting here run on n workers), returns the pid."""
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(folder)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"b5: only {len(os.listdir(folder))} of {n} workers ran a task in 120 s")
        time.sleep(0.002)
    return os.getpid()


def driver_b5(a):
    import mpi4py.MPI  # noqa: F401  MPI_Init here, before any clock starts
    for n in a.workers:
        with tempfile.TemporaryDirectory(prefix="b5-", dir=os.environ.get(TMP_ENV)) as folder:
            t0 = time.perf_counter()
            ex = start(n)
            try:
                pids = list(ex.map(functools.partial(b5_ready, folder, n), range(n)))
                startup = time.perf_counter() - t0
                if len(set(pids)) != n or os.getpid() in pids:
                    common.fail(f"b5: {n} tasks ran on {len(set(pids))} distinct workers")
                common.row("b5", f"startup_{n}_workers_s", startup, "s")
                common.b5_idle(n, a.idle_seconds)
            finally:
                shut(ex)
                # the next startup begins with no worker of this one left
                deadline = time.monotonic() + 30
                while any(is_worker(pid) for pid in common.descendants()) and time.monotonic() < deadline:
                    time.sleep(0.01)


def driver_b3_case(a):
    """One B3 run (fault a.case) on a fresh executor; writes what happened to a.out as JSON and ends
    at once (after an executor.shutdown only if the map finished)."""
    import concurrent.futures
    fault = a.case
    tmp = tempfile.mkdtemp(prefix="b3-", dir=os.environ.get(TMP_ENV))
    marker = os.path.join(tmp, "segv")
    segv_at = a.tasks // 2 if fault == "segfault_once" else -1
    fn = functools.partial(common.b3_task, ms=a.task_ms, segv_at=segv_at, marker=marker)
    strike = a.tasks * 3 // 10 if fault == "executor_kill" else -1
    out = dict(mpi=mpi_note(), results=[], wall=None, fault_at=None, reason="", last_at=0.0)
    ex = start(a.workers)
    t0, t0_clock = time.perf_counter(), time.time()
    try:
        for r in ex.map(fn, range(a.tasks), unordered=True, timeout=a.limit_s):
            out["results"].append(list(r))
            out["last_at"] = time.perf_counter() - t0
            if len(out["results"]) == strike:
                victim = r[1]
                if victim == os.getpid() or victim not in common.descendants():
                    common.fail(f"b3 {fault}: refusing to kill pid {victim} (not a worker of this run)")
                os.kill(victim, signal.SIGKILL)
                out["fault_at"] = time.perf_counter() - t0
        out["wall"] = time.perf_counter() - t0
    except concurrent.futures.TimeoutError:
        out["reason"] = f"the map was not done {a.limit_s:.3g} s after it started"
    except Exception as e:  # BrokenExecutor and the like: the run failed
        out["reason"] = f"{type(e).__name__}: {e}"
    if fault == "segfault_once" and os.path.exists(marker):
        out["fault_at"] = os.stat(marker).st_mtime - t0_clock
    out["workers_alive"] = sum(1 for pid in common.descendants() if is_worker(pid))
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    with open(a.out, "w") as f:
        json.dump(out, f)
    if out["wall"] is not None:
        shut(ex)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # not atexit: it joins the executor's thread, blocked for ever after a fault


def driver(argv):
    """The driver's main. A failure ends it at once (os._exit): a normal exit joins the executor's
    thread, which waits for ever when the executor is broken."""
    try:
        a = common.parse(argv, B3_EXTRA)
        if a.bench == "b3":
            driver_b3_case(a)
            return
        common.note(mpi_note())
        if a.bench == "b1":
            with_executor(a, common.b1)
        elif a.bench == "b2":
            with_executor(a, driver_b2)
        elif a.bench == "b5":
            driver_b5(a)
        elif a.bench == "b6":
            with_executor(a, common.b6)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    else:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ---- the supervisor: each benchmark ----


def run_b3(a, argv):
    known = ("none", "executor_kill", "segfault_once", "agent_kill")
    if any(f not in known for f in a.faults):
        common.fail(f"unknown fault in --faults (faults are {', '.join(known)})")
    ideal = math.ceil(a.tasks / a.workers) * a.task_ms / 1000.0
    common.header(system_name(), f"{a.workers} workers, {a.tasks} tasks of {a.task_ms} ms, map(unordered=True) "
                                 f"at its default chunksize (1), a fresh executor (and driver process) per run, "
                                 f"{a.repeats} repeats")
    common.note(f"executor_kill: SIGKILL of the worker that returned the latest result once {a.tasks * 3 // 10} "
                f"results are in; segfault_once: task {a.tasks // 2} segfaults its worker the first time it runs")
    if "agent_kill" in a.faults:
        common.note("no agent_kill rows: mpi4py.futures has no process supervising its workers "
                    "(Open MPI's orted launches them but runs no tasks)")
    faults = [f for f in a.faults if f != "agent_kill"]
    mpi_noted = []

    def run(f, limit):
        fd, path = tempfile.mkstemp(prefix="b3-", suffix=".json", dir=os.environ[TMP_ENV])
        os.close(fd)
        try:
            rc = run_driver(argv + ["--case", f, "--limit-s", repr(limit), "--out", path], limit + 300,
                            f"b3 {f}", stdout=sys.stderr)
            try:
                with open(path) as fh:
                    out = json.load(fh)
            except (OSError, ValueError):
                out = None
        finally:
            os.unlink(path)
        if out is None:
            if rc is not None and rc >= 0:
                common.fail(f"b3 {f}: the driver ended with status {rc} before reporting")
            why = "was stopped at its time limit" if rc is None else f"was killed by signal {-rc}"
            return False, None, None, f"the driver {why} before reporting"
        if not mpi_noted:
            mpi_noted.append(out["mpi"])
            common.note(out["mpi"])
        results = [tuple(r) for r in out["results"]]
        if rc != 0:
            common.fail(f"b3 {f}: the driver ended with status {rc}")
        wall, fault_at = out["wall"], out["fault_at"]
        if f != "none" and fault_at is None:
            common.fail(f"b3 {f}: the fault never happened")
        if wall is not None:
            return True, wall, results, ""
        if fault_at is None:
            return False, wall, results, f"stopped: {out['reason']} ({len(results)} of {a.tasks} results in)"
        alive = out["workers_alive"]
        return False, wall, results, (
            "mpi4py.futures lost the task of the worker that died and the driver waits for it for ever ("
            + ("Open MPI aborted the spawned job: no worker left" if alive == 0 else
               f"{alive} of {a.workers} workers alive") +
            f"); stopped: {out['reason']} ({len(results)} of {a.tasks} results in, the last at "
            f"{out['last_at']:.3g} s; the fault at {fault_at:.3g} s)")

    common.b3_repeat(a, faults, run, lambda f, base: max(60.0, 20 * ideal) if f == "none" else
                     max(10.0, 5 * (base if base is not None else 2 * ideal)))


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == CHILD:
        driver(argv[1:])
        return
    a = common.parse(argv)
    become_supervisor()
    if a.bench == "b3":
        run_b3(a, argv)
        return
    name = system_name()
    if a.bench == "b1":
        common.header(name, f"{a.workers} workers, scale {a.scale:g} (tasks: {common.b1_counts(a)}), "
                            f"medians of {a.repeats} runs")
        ideal = sum(math.ceil(common.b1_task_count(a.workers, a.scale, d) / a.workers) * d / 1000.0
                    for d in a.durations)
        limit = 120 + 20 * ideal * len(a.modes) * a.repeats
    elif a.bench == "b2":
        common.header(name, f"{a.workers} workers, medians of {a.repeats} runs")
        limit = 300 + 300 * a.repeats
    elif a.bench == "b5":
        if any(n < 1 for n in a.workers):
            common.fail("--workers must be positive")
        common.header(name, f"executors of {','.join(map(str, a.workers))} workers, idle {a.idle_seconds:g} s; "
                            f"startup: from MPIPoolExecutor(max_workers=n) through bootup() to n tasks running "
                            f"at once on n workers")
        limit = sum(180 + 2 * n + a.idle_seconds for n in a.workers)
    else:
        common.header(name, f"{a.workers} workers, {a.bytes} bytes, medians of {a.repeats} trips")
        limit = 120 + (a.repeats + 1) * (a.bytes / 2**20) * 0.5
    rc = run_driver(argv, limit, a.bench)
    sys.exit(1 if rc is None else (rc if rc >= 0 else 128 - rc))


if __name__ == "__main__":
    main()
