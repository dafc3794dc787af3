#!/usr/bin/python3
"""The IPyParallel peer: an IPyParallel cluster doing the work of fibra's benchmark programs, with
the flags and rows of benchmarks/README.md.

    /usr/bin/python3 benchmarks/peers/ipyparallel_peer.py {b1|b2|b3|b5|b6} [flags]

The cluster is a local one started by this program: ipyparallel.Cluster(n=N) (one ipcontroller
and N ipengine processes, IPyParallel's defaults otherwise), start_and_connect_sync(), a
LoadBalancedView, and stop_cluster_sync() at the end. Its profile (connection files, logs) lives in
a temporary IPYTHONDIR removed at the end. Debian's python3-ipyparallel (7.1); run with Debian's
/usr/bin/python3.

What the calls of common's loops are here:
    map(fn, items)       view.map_async(fn, items).get(): IPyParallel's default chunk size (1)
    map(fn, items, k)    view.map_async(fn, items, chunksize=k).get()
    submit(fn, *args)    view.apply_async(fn, *args)
    get(ar)              ar.get()
IPyParallel ships a function's code and imports its module on the engine for its globals: the
engines get this directory on their PYTHONPATH (they inherit this program's environment).

Processes: the controller (and the scheduler processes it forks) and the engines are children of
this program, each in a session of its own (IPyParallel starts them so); each engine starts a
"nanny" process of its own (IPyParallel 7.1: it relays signals to its engine and tells the
controller at once when its engine dies). All of them are ended before this program exits, also on
SIGTERM; see DIE_WITH_DRIVER for SIGKILL.

PEER_DEBUG=1 in the environment: progress, kills and clean-up on stderr, and a stack dump of every
thread on SIGUSR1.
"""
import argparse
import logging
import os
import queue
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

# Every wait for a result is bounded by this much (seconds); a run that needs more is broken, not
# slow. Starting n engines: start_timeout(n).
CALL_TIMEOUT = 900.0


def start_timeout(n):
    return max(120.0, 10.0 * n)

TMP = None  # this program's temporary directory: IPYTHONDIR, B3's marker files
CLUSTERS = []  # the clusters started and not yet stopped
ipp = None  # the ipyparallel module, imported once IPYTHONDIR is set

# The controller and the engines are started through this: they get SIGKILL when the thread that
# started them (this program's main thread) ends, and so do the processes the controller forks (its
# schedulers), when the controller ends: nothing outlives a driver killed with SIGKILL. (SIGTERM is
# handled: the cluster is stopped.) The module then runs in this same process, as `-m` would run it.
# (An engine's nanny, which it starts with Popen, ends by itself about 3 s after its engine.)
DIE_WITH_DRIVER = (
    "import ctypes, os, runpy, signal, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def die_with_parent():\n"
    "    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "die_with_parent()\n"
    "if os.getppid() != int(os.environ['IPP_PEER_DRIVER']):\n"
    "    os._exit(1)  # the driver is gone already\n"
    "os.register_at_fork(after_in_child=die_with_parent)\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n")


# Processes of clusters being stopped ({pid: start time}): an engine's nanny outlives its engine by
# up to 3 s, and is no descendant of this program then; cleanup() ends them too.
STOPPING = {}


def cleanup():
    """Ends every process this program started (directly or not) and removes its files."""
    for _ in range(3):
        common.end_descendants(1.0, also=STOPPING)
        if TMP:
            shutil.rmtree(TMP, ignore_errors=True)
        if not common.descendants() and not (TMP and os.path.exists(TMP)):
            break
        time.sleep(0.3)


def setup():
    """The environment the cluster's processes inherit, then the import of ipyparallel."""
    global TMP, ipp
    TMP = tempfile.mkdtemp(prefix="ipp-peer-")
    common.on_termination(cleanup)
    os.environ["IPYTHONDIR"] = os.path.join(TMP, "ipython")
    os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(TMP, "runtime")
    os.environ["IPP_PEER_DRIVER"] = str(os.getpid())
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in paths if p != HERE])
    import ipyparallel
    ipp = ipyparallel


class Cluster:
    """An IPyParallel cluster of n engines and a client, stopped (every process of it ended) on exit."""

    def __init__(self, n):
        timeout = start_timeout(n)
        from traitlets.config import Config
        cfg = Config()
        cfg.LocalControllerLauncher.controller_cmd = [sys.executable, "-c", DIE_WITH_DRIVER, "ipyparallel.controller"]
        cfg.LocalEngineSetLauncher.engine_cmd = [sys.executable, "-c", DIE_WITH_DRIVER, "ipyparallel.engine"]
        self.n = n
        self.client = None
        guard = common.watchdog(timeout + 30, f"starting an IPyParallel cluster of {n} engines", cleanup)
        try:
            self.cluster = ipp.Cluster(n=n, profile_dir=os.path.join(TMP, "ipython", "profile_default"),
                                       engine_timeout=int(timeout), config=cfg, log_level=logging.WARNING)
            CLUSTERS.append(self.cluster)
            self.client = self.cluster.start_and_connect_sync()
            self.view = self.client.load_balanced_view()
        finally:
            guard.cancel()

    def engine_pids(self):
        return sorted(self.client[:].apply_async(os.getpid).get(timeout=CALL_TIMEOUT))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop(self.cluster, self.client)


def stop(cluster, client):
    """Closes the client and stops the cluster, bounded; then ends whatever of it is left."""
    guard = common.watchdog(120, "stopping the IPyParallel cluster", cleanup)
    # The cluster's processes now: the controller, the engines and each engine's nanny (a child of
    # its engine in a session of its own, which outlives its engine by up to 3 s to tell the
    # controller, and then is no descendant of this program any more).
    tree = common.start_times(common.descendants())
    STOPPING.update(tree)
    if os.environ.get("PEER_DEBUG"):
        print(f"peer: {time.strftime('%T')} stopping the cluster: {sorted(tree)}", file=sys.stderr, flush=True)
    try:
        if client is not None:
            try:
                client.close()
            except Exception as e:  # noqa: BLE001 (after a fault it may complain; go on)
                print(f"peer: closing the client: {e!r}", file=sys.stderr)
        try:
            cluster.stop_cluster_sync()
        except Exception as e:  # noqa: BLE001
            print(f"peer: stopping the cluster: {e!r}", file=sys.stderr)
        if cluster in CLUSTERS:
            CLUSTERS.remove(cluster)
        deadline = time.monotonic() + 5
        while common.alive(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = common.alive(tree)
        left.update(common.start_times(common.descendants()))
        if left:
            if os.environ.get("PEER_DEBUG"):
                print(f"peer: processes left 5 s after stopping the cluster: {sorted(left)}; ending them",
                      file=sys.stderr)
            common.end_processes(left, 1.0)
        for pid in tree:
            STOPPING.pop(pid, None)
    finally:
        guard.cancel()


class Executor:
    """A LoadBalancedView as the three calls common's loops use."""

    def __init__(self, view):
        self.view = view

    def map(self, fn, items, chunksize=None):
        if chunksize:
            return self.view.map_async(fn, items, chunksize=chunksize).get(timeout=CALL_TIMEOUT)
        return self.view.map_async(fn, items).get(timeout=CALL_TIMEOUT)

    def submit(self, fn, *args):
        return self.view.apply_async(fn, *args)

    def get(self, ar):
        return ar.get(timeout=CALL_TIMEOUT)


def versions():
    return f"IPyParallel {ipp.__version__}"


def cluster_words(n):
    return (f"ipyparallel.Cluster(n={n}): 1 ipcontroller + {n} ipengine processes, a LoadBalancedView "
            f"(task scheme leastload, at most 1 task queued per engine: IPyParallel's defaults)")


# ---- b1, b2, b6: common's loops ----


def run_b1(a):
    common.header(versions(), f"{cluster_words(a.workers)}, scale {a.scale:g} (tasks: {common.b1_counts(a)}), "
                              f"map = view.map (chunk size 1), seq = view.apply_async x {a.workers} then "
                              f"get(), medians of {a.repeats} runs")
    with Cluster(a.workers) as c:
        common.b1(Executor(c.view), a)


def run_b2(a):
    # IPyParallel's per-task cost is about 1-3 ms: the contract's counts (10 million tasks, 200,000
    # submits) would take hours. A rate is a rate: fewer tasks, said in a # line.
    map_tasks = min(a.map_tasks, 5_000)
    async_tasks = min(a.async_tasks, 5_000)
    roundtrips = min(a.roundtrips, 500)
    chunked = argparse.Namespace(**vars(a))
    chunked.map_tasks = min(a.map_tasks, 1_000_000)  # 10 million: over a minute more, and no faster
    common.header(versions(), f"{cluster_words(a.workers)}, medians of {a.repeats} runs")
    common.note(f"counts capped for IPyParallel's per-task cost: map at the default chunk size (1) {map_tasks} "
                f"tasks, chunked maps (view.map chunksize {','.join(map(str, a.chunksizes))}) {chunked.map_tasks} "
                f"items, apply_async {async_tasks} tasks, {roundtrips} round trips (flags asked {a.map_tasks}, "
                f"{a.async_tasks}, {a.roundtrips})")
    with Cluster(a.workers) as c:
        common.b2(Executor(c.view), chunked, map_tasks=map_tasks, async_tasks=async_tasks, roundtrips=roundtrips)


def run_b6(a):
    common.header(versions(), f"{cluster_words(a.workers)}, {a.bytes} bytes (view.apply_async(echo, array) "
                              f"and get(); through the controller's task scheduler), medians of {a.repeats} trips")
    with Cluster(a.workers) as c:
        common.b6(Executor(c.view), a)


# ---- b5 ----


def run_b5(a):
    common.header(versions(), f"ipyparallel.Cluster(n=n) for n in {','.join(map(str, a.workers))}; startup = from "
                              f"Cluster() through start_and_connect_sync() (which waits 1 s between the "
                              f"controller and the engines: its default delay) to one task run on each of the "
                              f"n engines; idle {a.idle_seconds} s")
    for n in a.workers:
        limit = start_timeout(n)
        t = time.perf_counter()
        with Cluster(n) as c:
            ids = list(c.client.ids)
            out = [c.client[e].apply_async(common.noop, e) for e in ids]
            if [ar.get(timeout=limit) for ar in out] != ids or len(ids) != n:
                common.fail(f"b5: {n} engines did not each run their task right")
            common.row("b5", f"startup_{n}_workers_s", time.perf_counter() - t, "s")
            pids = c.engine_pids()
            mine = set(common.descendants())
            if not set(pids) <= mine:
                common.fail(f"b5: the engine processes {sorted(set(pids) - mine)} are not descendants of the driver")
            common.b5_idle(n, a.idle_seconds)


# ---- b3 ----


RETRIES = 3  # the LoadBalancedView's retries in B3: a task whose engine dies is run again elsewhere


def b3_run(a, fault, bound):
    """One run on a fresh cluster. Returns (finished, wall, results, why)."""
    marker_dir = tempfile.mkdtemp(prefix="segv-", dir=TMP)
    marker = os.path.join(marker_dir, "segv") if fault == "segfault_once" else ""
    segv_at = a.tasks // 2 if fault == "segfault_once" else -1
    strike = {"executor_kill": a.tasks * 3 // 10}.get(fault, -1)
    results, failed, state = [], [], {"why": "", "killed": None}
    done_q = queue.Queue()
    index = {}

    def take(ar):
        """One finished task: its result checked and kept (or its failure counted); the kill at 30%."""
        i = index[ar.msg_ids[0]]
        try:
            value = ar.get(0)
        except Exception as e:  # noqa: BLE001 (the task failed: the system's answer)
            failed.append(i)
            state["why"] = state["why"] or f"task {i} failed: {type(e).__name__}: {str(e).strip()[:300]}"
            return
        if not (isinstance(value, tuple) and value[0] == i):
            common.fail(f"b3 {fault}: task {i} returned {value!r}")
        results.append(value)
        if len(results) == strike:
            victim = value[1]
            if victim == os.getpid() or victim not in common.descendants():
                common.fail(f"b3 {fault}: refusing to kill pid {victim} (not an engine of this run)")
            os.kill(victim, signal.SIGKILL)
            state["killed"] = time.perf_counter()
            if os.environ.get("PEER_DEBUG"):
                print(f"peer: {time.strftime('%T')} killed engine {victim} at {state['killed'] - t0:.2f} s",
                      file=sys.stderr, flush=True)

    with Cluster(a.workers) as c:
        view = c.view
        view.retries = RETRIES
        t0 = time.perf_counter()
        # Submitting takes about as long as running here: results are read between submits too,
        # so that the kill comes at 30% of the results, not after the last submit.
        for i in range(a.tasks):
            ar = view.apply_async(common.b3_task, i, a.task_ms, segv_at, marker)
            index[ar.msg_ids[0]] = i
            ar.add_done_callback(done_q.put)
            while not done_q.empty():
                take(done_q.get_nowait())
        deadline = time.monotonic() + bound
        while len(results) + len(failed) < a.tasks:
            try:
                ar = done_q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                state["why"] = state["why"] or (f"hung: no more results for {bound:.0f} s ({len(results)} of "
                                                f"{a.tasks} came back)")
                break
            take(ar)
        wall = time.perf_counter() - t0
    why, killed = state["why"], state["killed"]
    if fault == "segfault_once" and not os.path.exists(marker):
        common.fail("b3 segfault_once: the task that segfaults never ran")
    if strike > 0 and killed is None and not why:
        common.fail(f"b3 {fault}: the kill never happened")
    if os.environ.get("PEER_DEBUG"):
        print(f"peer: b3 {fault}: {len(results)} results, {len(failed)} failed, wall {wall:.2f} s, "
              f"killed at {killed and killed - t0}, why {why!r}", file=sys.stderr, flush=True)
    shutil.rmtree(marker_dir, ignore_errors=True)
    return (not why), wall, results, why


def run_b3(a):
    unknown = [f for f in a.faults if f not in ("none", "executor_kill", "segfault_once", "agent_kill")]
    if unknown:
        common.fail(f"unknown faults {unknown} (faults: none, executor_kill, segfault_once, agent_kill)")
    faults = [f for f in a.faults if f in ("none", "executor_kill", "segfault_once")]
    common.header(versions(), f"{cluster_words(a.workers)} with retries={RETRIES}, {a.tasks} tasks of {a.task_ms} ms, "
                              f"one view.apply_async per task, results read as they complete, a fresh "
                              f"cluster per run, medians of {a.repeats} repeats")
    common.note("executor_kill: SIGKILL of the engine that returned the result at 30%; segfault_once: task "
                f"{a.tasks // 2} segfaults its engine once. An engine that dies is not restarted; its nanny (a "
                "child of the engine) tells the controller at once, whose task scheduler waits 5 s for late "
                "results and then fails the engine's task with EngineError, or, with retries, runs it again "
                "on another engine")
    if "agent_kill" in a.faults:
        common.note("agent_kill: no rows: IPyParallel 7.1 has no process supervising engines (the engine's "
                    "nanny only relays signals and reports the engine's exit; SIGKILLed, no task is affected)")
    # a dead engine's task is failed or retried 5 s after it is seen (about 35 s if its nanny
    # cannot tell: heartbeats, 3 s x 10): allow for it
    common.b3_repeat(a, faults, lambda f, bound: b3_run(a, f, bound),
                     lambda _f, base: 180.0 if base is None else max(60.0, 5 * base))


def main():
    a = common.parse(sys.argv[1:])
    setup()
    if os.environ.get("PEER_DEBUG"):
        import faulthandler
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        {"b1": run_b1, "b2": run_b2, "b3": run_b3, "b5": run_b5, "b6": run_b6}[a.bench](a)
    finally:
        for cluster in list(CLUSTERS):
            try:
                stop(cluster, None)
            except BaseException as e:  # noqa: BLE001
                print(f"peer: stopping a cluster: {e!r}", file=sys.stderr)
        cleanup()


if __name__ == "__main__":
    main()
