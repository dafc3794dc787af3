#!/usr/bin/python3
"""The Dask peer: Dask distributed doing the work of fibra's benchmark programs, with the flags and
rows of benchmarks/README.md.

    /usr/bin/python3 benchmarks/peers/dask_peer.py {b1|b2|b3|b5|b6} [flags]

The cluster is the one ../shared/BENCHMARKS.md names: LocalCluster(n_workers=N,
threads_per_worker=1, processes=True) and a Client on it (no dashboard, logs at ERROR on stderr,
worker spill files in a temporary directory removed at the end). Debian's python3-distributed
(2022.12); run with Debian's /usr/bin/python3.

What the calls of common's loops are here:
    map(fn, items)       client.map(fn, items, pure=False), then gather: one task per item (Dask's
                         map has no chunk size)
    map(fn, items, k)    client.map of common.map_opaque_chunk over chunks of k items, each chunk
                         (and its results) in a common.Opaque, flattened. Dask walks the Python
                         lists of a task's arguments and results item by item (about 20 us per
                         item here); B2 prints the rate with plain lists (common.map_chunk) too.
    submit(fn, *args)    client.submit(fn, *args, pure=False)
    get(future)          future.result()
pure=False everywhere: with Dask's default (pure=True) identical calls (B1's tasks all sleep the
same time) share one key and would run once.

PEER_DEBUG=1 in the environment: progress, kills and clean-up on stderr, and a stack dump of every
thread on SIGUSR1.
"""
import functools
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import dask
import distributed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Every wait for a result is bounded by this much (seconds); a run that needs more is broken, not
# slow. Starting n workers: start_timeout(n).
CALL_TIMEOUT = 900.0


def start_timeout(n):
    return max(120.0, 10.0 * n)

# This program's temporary directory (worker spill space, B3's marker files), made in main(). Worker
# processes are started with 'spawn', which imports this file again as __mp_main__: nothing at
# module level may have side effects.
TMP = None


def cleanup():
    """Ends every process this program started (directly or not) and removes its files."""
    # The nannies (objects in this process, also those of a cluster still starting) must not start
    # the worker processes ended here again.
    for _ in range(10):
        try:
            nannies = list(distributed.Nanny._instances)
            break
        except RuntimeError:  # the set changed size meanwhile
            nannies = []
    for nanny in nannies:
        try:
            nanny.close_gracefully(reason="the benchmark ends")
        except Exception:  # noqa: BLE001
            pass
    for _ in range(5):
        ended = common.end_descendants(1.0)
        if os.environ.get("PEER_DEBUG"):
            print(f"peer: {time.strftime('%T')} cleanup ended {ended}", file=sys.stderr, flush=True)
        if TMP:
            shutil.rmtree(TMP, ignore_errors=True)
        time.sleep(0.3)  # a nanny that was starting a worker makes its directory, then its process
        if not common.descendants() and not (TMP and os.path.exists(TMP)):
            break



class Executor:
    """A distributed.Client as the three calls common's loops use."""

    def __init__(self, client, plain_chunks=False):
        self.client = client
        self.plain_chunks = plain_chunks  # chunks as lists (slow in Dask) instead of common.Opaque

    def map(self, fn, items, chunksize=None):
        c = self.client
        if not chunksize:
            futures = c.map(fn, items, pure=False)
            distributed.wait(futures, timeout=CALL_TIMEOUT)
            return c.gather(futures)
        if self.plain_chunks:
            chunks = [items[i:i + chunksize] for i in range(0, len(items), chunksize)]
            futures = c.map(functools.partial(common.map_chunk, fn), chunks, pure=False)
        else:
            chunks = [common.Opaque(items[i:i + chunksize]) for i in range(0, len(items), chunksize)]
            futures = c.map(functools.partial(common.map_opaque_chunk, fn), chunks, pure=False)
        distributed.wait(futures, timeout=CALL_TIMEOUT)
        out = []
        for part in c.gather(futures):
            out.extend(part if self.plain_chunks else part.items)
        return out

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)

    def get(self, future):
        return future.result(timeout=CALL_TIMEOUT)


class Cluster:
    """LocalCluster + Client for n workers, closed (and every process of it ended) on exit."""

    def __init__(self, n):
        self.n = n
        limit = start_timeout(n)
        guard = common.watchdog(limit + 10, f"starting a Dask cluster of {n} workers", cleanup)
        try:
            self.cluster = new_cluster(n_workers=n, local_directory=TMP)
            self.client = distributed.Client(self.cluster)
            self.client.wait_for_workers(n, timeout=limit)
        finally:
            guard.cancel()

    def worker_pids(self):
        return sorted(self.client.run(os.getpid).values())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        close(self.client, self.cluster)


def new_cluster(**kw):
    cluster = distributed.LocalCluster(threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=logging.ERROR, **kw)
    return cluster


def close(client, cluster, subprocesses=()):
    """Closes a client and its cluster, bounded; then ends whatever of them is still running."""
    guard = common.watchdog(120, "closing the Dask cluster", cleanup)
    try:
        try:
            client.close(timeout=30)
        except Exception as e:  # noqa: BLE001 (closing after a fault may complain; go on)
            print(f"peer: closing the client: {e!r}", file=sys.stderr)
        for p in subprocesses:
            if p.poll() is None:
                p.terminate()
        try:
            cluster.close(timeout=30)
        except Exception as e:  # noqa: BLE001
            print(f"peer: closing the cluster: {e!r}", file=sys.stderr)
        for p in subprocesses:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # the worker processes are the driver's children (the nannies live in the driver); give
        # them a moment to go, then end any left
        deadline = time.monotonic() + 10
        while worker_like_descendants() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = worker_like_descendants()
        if left:
            print(f"peer: processes left after closing the cluster: {left}; killing them", file=sys.stderr)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    finally:
        guard.cancel()


def worker_like_descendants():
    """Descendants other than multiprocessing's resource tracker (which lives as long as the driver
    and ends with it)."""
    out = []
    for pid in common.descendants():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"resource_tracker" not in cmd:
            out.append(pid)
    return out


def versions():
    return f"Dask distributed {distributed.__version__}"


# ---- b1, b2, b6: common's loops ----


def run_b1(a):
    common.header(versions(), f"LocalCluster of {a.workers} worker processes x 1 thread, scale {a.scale:g} "
                              f"(tasks: {common.b1_counts(a)}), map = client.map + gather (one task per "
                              f"item), seq = client.submit x {a.workers} then result(), medians of {a.repeats} runs")
    with Cluster(a.workers) as c:
        common.b1(Executor(c.client), a)


def run_b2(a):
    # Dask's per-task cost is about 1-3 ms (10 ms for one round trip: the client batches its
    # messages every 10 ms): the contract's counts (10 million tasks, 200,000 submits) would take
    # hours. A rate is a rate: fewer tasks, said in a # line.
    map_tasks = min(a.map_tasks, 10_000)
    async_tasks = min(a.async_tasks, 5_000)
    roundtrips = min(a.roundtrips, 500)
    common.header(versions(), f"LocalCluster of {a.workers} worker processes x 1 thread, medians of {a.repeats} runs")
    common.note(f"counts capped for Dask's per-task cost: map at the default (client.map, one task per item) "
                f"{map_tasks} tasks, submit {async_tasks} tasks, {roundtrips} round trips (flags asked "
                f"{a.map_tasks}, {a.async_tasks}, {a.roundtrips}); the chunked maps (chunk sizes "
                f"{','.join(map(str, a.chunksizes))}) run all {a.map_tasks} items, each chunk a task of "
                f"common.map_opaque_chunk with the chunk and its results in a common.Opaque (see below)")
    with Cluster(a.workers) as c:
        ex = Executor(c.client)
        common.b2(ex, a, map_tasks=map_tasks, async_tasks=async_tasks, roundtrips=roundtrips)
        # The same chunked map with plain lists, for the record: Dask walks lists item by item.
        n = min(a.map_tasks, 200_000)
        k = max(1, min(max(a.chunksizes or [10_000]), n // a.workers))
        plain = Executor(c.client, plain_chunks=True)
        items = list(range(n))
        t = time.perf_counter()
        if plain.map(common.noop, items, k) != items:
            common.fail("b2 map with plain list chunks returned wrong results")
        common.note(f"the chunked map with each chunk a plain list (common.map_chunk) instead of an Opaque: "
                    f"{n / (time.perf_counter() - t):.0f} tasks/s ({n} items, chunk size {k}): Dask's messages "
                    f"walk the lists item by item")


def run_b6(a):
    common.header(versions(), f"LocalCluster of {a.workers} worker process x 1 thread, {a.bytes} bytes "
                              f"(client.submit(echo, array) and result(); the array travels in the task "
                              f"through the scheduler), medians of {a.repeats} trips")
    with Cluster(a.workers) as c:
        common.b6(Executor(c.client), a)


# ---- b5 ----


def run_b5(a):
    common.header(versions(), f"LocalCluster(n_workers=n, threads_per_worker=1, processes=True) for n in "
                              f"{','.join(map(str, a.workers))}; startup = from LocalCluster() to one task "
                              f"run on each of the n workers; idle {a.idle_seconds} s")
    for n in a.workers:
        limit = start_timeout(n)
        t = time.perf_counter()
        with Cluster(n) as c:
            workers = list(c.client.scheduler_info()["workers"])
            futures = [c.client.submit(common.noop, i, workers=[w], allow_other_workers=False, pure=False)
                       for i, w in enumerate(workers)]
            distributed.wait(futures, timeout=limit)
            if c.client.gather(futures) != list(range(n)) or len(workers) != n:
                common.fail(f"b5: {n} workers did not each run their task right")
            common.row("b5", f"startup_{n}_workers_s", time.perf_counter() - t, "s")
            del futures
            pids = c.worker_pids()
            mine = set(common.descendants())
            if not set(pids) <= mine:
                common.fail(f"b5: the worker processes {sorted(set(pids) - mine)} are not descendants of the driver")
            common.b5_idle(n, a.idle_seconds)


# ---- b3 ----


def b3_agent_cluster(n):
    """A scheduler in this process and n `dask worker` processes, each a nanny process supervising
    one worker process: the process tree in which a nanny can be killed without killing the driver.
    (In a LocalCluster the nannies are objects in the driver's process.)"""
    cluster = new_cluster(n_workers=0)
    procs = []
    env = dict(os.environ)  # the workers import common (the task functions) by name
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        for k in range(n):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
                 "--nthreads", "1", "--nworkers", "1", "--nanny", "--no-dashboard", "--host", "127.0.0.1",
                 "--local-directory", TMP, "--name", f"agent-{k}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        client = distributed.Client(cluster)
        client.wait_for_workers(n, timeout=start_timeout(n))
        return cluster, client, procs
    except BaseException:
        for p in procs:
            p.kill()
        cluster.close(timeout=30)
        raise


def scheduler_view(keys, dask_scheduler=None):
    """(debugging) The scheduler's state of `keys`."""
    out = {}
    for k in keys:
        ts = dask_scheduler.tasks.get(k)
        out[k[-6:]] = None if ts is None else (ts.state, [w.address for w in ts.who_has],
                                               ts.processing_on and ts.processing_on.address,
                                               sorted(c.client_key[-6:] for c in ts.who_wants))
    out["workers"] = sorted(dask_scheduler.workers)
    return out


def ppid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def b3_run(a, fault, bound):
    """One run on a fresh cluster. Returns (finished, wall, results, why)."""
    marker_dir = tempfile.mkdtemp(prefix="segv-", dir=TMP)
    marker = os.path.join(marker_dir, "segv") if fault == "segfault_once" else ""
    segv_at = a.tasks // 2 if fault == "segfault_once" else -1
    strike = {"executor_kill": a.tasks * 3 // 10, "agent_kill": a.tasks * 6 // 10}.get(fault, -1)
    procs = []
    guard = common.watchdog(start_timeout(a.workers) + 30, f"starting the b3 {fault} cluster", cleanup)
    if fault == "agent_kill":
        cluster, client, procs = b3_agent_cluster(a.workers)
    else:
        c = Cluster(a.workers)
        cluster, client = c.cluster, c.client
    guard.cancel()
    results, why, killed = [], "", None
    done_q = queue.Queue()
    try:
        t0 = time.perf_counter()
        futures = client.map(common.b3_task, range(a.tasks), ms=a.task_ms, segv_at=segv_at, marker=marker,
                             pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        ac = distributed.as_completed(futures, with_results=True, raise_errors=False)
        pending = {f.key: f for f in futures}
        del futures  # results are read as they come; a result read is released (no recomputation)

        def feed():
            for item in ac:
                done_q.put(item)
        threading.Thread(target=feed, daemon=True).start()
        deadline = time.monotonic() + bound
        failed = 0
        while len(results) + failed < a.tasks:
            try:
                fut, value = done_q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                why = why or f"hung: no more results for {bound:.0f} s ({len(results)} of {a.tasks} came back)"
                if os.environ.get("PEER_DEBUG"):
                    keys = list(pending)[:10]
                    print(f"peer: hung; client side: {[(index[k], pending[k].status) for k in keys]}",
                          file=sys.stderr, flush=True)
                    print("peer: scheduler side:", client.run_on_scheduler(scheduler_view, keys=keys),
                          file=sys.stderr, flush=True)
                break
            if isinstance(value, BaseException):
                failed += 1
                why = why or f"task {index[fut.key]} failed: {type(value).__name__}: {value}"
                continue
            i = index[fut.key]
            if not (isinstance(value, tuple) and value[0] == i):
                common.fail(f"b3 {fault}: task {i} returned {value!r}")
            results.append(value)
            pending.pop(fut.key, None)
            fut.release()
            if len(results) == strike:
                victim = value[1] if fault == "executor_kill" else ppid_of(value[1])
                if victim == os.getpid() or victim not in common.descendants():
                    common.fail(f"b3 {fault}: refusing to kill pid {victim} (not a system process of this run)")
                os.kill(victim, signal.SIGKILL)
                killed = time.perf_counter()
                if os.environ.get("PEER_DEBUG"):
                    print(f"peer: {time.strftime('%T')} killed {victim} ({fault}) at {killed - t0:.2f} s",
                          file=sys.stderr, flush=True)
        wall = time.perf_counter() - t0
        if fault == "segfault_once" and not os.path.exists(marker):
            common.fail("b3 segfault_once: the task that segfaults never ran")
        if strike > 0 and killed is None and not why:
            common.fail(f"b3 {fault}: the kill never happened")
        if os.environ.get("PEER_DEBUG"):
            print(f"peer: b3 {fault}: {len(results)} results, {failed} failed, wall {wall:.2f} s, "
                  f"killed at {killed and killed - t0}, why {why!r}", file=sys.stderr, flush=True)
        return (not why), wall, results, why
    finally:
        close(client, cluster, procs)
        shutil.rmtree(marker_dir, ignore_errors=True)


def run_b3(a):
    unknown = [f for f in a.faults if f not in ("none", "executor_kill", "segfault_once", "agent_kill")]
    if unknown:
        common.fail(f"unknown faults {unknown} (faults: none, executor_kill, segfault_once, agent_kill)")
    faults = [f for f in a.faults if f in ("none", "executor_kill", "segfault_once", "agent_kill")]
    common.header(versions(), f"{a.workers} workers x 1 thread, {a.tasks} tasks of {a.task_ms} ms, client.map "
                              f"(one task per item) read with as_completed, a fresh cluster per run, medians "
                              f"of {a.repeats} repeats")
    common.note("executor_kill: SIGKILL of the worker process that returned the result at 30%; segfault_once: "
                f"task {a.tasks // 2} segfaults its worker process once; agent_kill: SIGKILL at 60% of the nanny "
                "process of the worker that returned the result (a LocalCluster keeps its nannies inside the "
                f"driver, so this run uses a scheduler in the driver and {a.workers} `dask worker` processes, "
                "nanny + worker each). Dask reschedules the tasks of a worker that is gone and computes again "
                "the results it held; in a LocalCluster the nanny starts a new worker process; a worker whose "
                "nanny is killed ends with it and is not replaced")
    common.b3_repeat(a, faults, lambda f, bound: b3_run(a, f, bound),
                     lambda _f, base: 120.0 if base is None else max(20.0, 5 * base))


def main():
    global TMP
    a = common.parse(sys.argv[1:])
    TMP = tempfile.mkdtemp(prefix="dask-peer-")
    common.on_termination(cleanup)
    if os.environ.get("PEER_DEBUG"):
        import faulthandler
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    dask.config.set({"temporary-directory": TMP})
    try:
        {"b1": run_b1, "b2": run_b2, "b3": run_b3, "b5": run_b5, "b6": run_b6}[a.bench](a)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
