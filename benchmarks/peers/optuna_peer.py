#!/usr/bin/python3
"""The Optuna peer of benchmark "tune": what a hyper-parameter search costs beyond the trainable's
own time, with Optuna's SuccessiveHalvingPruner over a study shared by worker processes.

    /usr/bin/python3 benchmarks/peers/optuna_peer.py tune [--trials N] [--steps S] [--step-ms MS]
                                                          [--workers W] [--seed K] [--limit-s L]

Run with Debian's /usr/bin/python3 (python3-optuna 3.1). The trainable is synthetic: a trial draws
x in [0, 1] and, for t = 1..S, sleeps MS ms, reports x * sqrt(t) at step t and asks whether to stop
(maximize). W worker processes share one study through a JournalStorage on a JournalFileStorage in a
fresh temporary folder, each running its share of the N trials with a RandomSampler seeded K + its
index. wall_s is from just before the workers start to after they all joined; the trials are then
read back from the storage and checked (complete + pruned == N).

Rows: wall_s, steps (intermediate values reported, all trials), trials_pruned, sleep_per_worker_s
(steps * MS / 1000 / W: the wall time of a search with no overhead and a perfect balance),
overhead_pct (100 * (wall_s / sleep_per_worker_s - 1)) and results_per_s (steps / wall_s).

Every wait is bounded: workers not joined --limit-s seconds after the start are terminated (then
SIGKILLed) and the peer exits with status 1 naming them. On SIGTERM, SIGINT or SIGHUP every
descendant of this process is ended and the temporary folder removed before it exits (128 + the
signal).
"""
import argparse
import math
import multiprocessing
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import optuna  # noqa: E402

DEFAULTS = dict(trials=10_000, steps=20, step_ms=1.0, workers=2, seed=0, limit_s=1800.0)
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STUDY = "fibra-tune"
SETUP_LIMIT = 300.0  # seconds for creating the study, and for reading it back

# Fork, not spawn: the workers start from this process with Optuna already imported, so wall_s holds
# the search and not a second or so per worker of interpreter start-up and `import optuna` (which a
# long-lived tuning service pays once, not per search). Nothing here runs a thread when the workers
# are forked (the watchdog timers are cancelled first), so forking is safe.
CTX = multiprocessing.get_context("fork")


def parse(argv):
    if not argv or argv[0] != "tune":
        common.fail(f"usage: {os.path.basename(sys.argv[0])} tune [--trials N] [--steps S] [--step-ms MS] "
                    f"[--workers W] [--seed K] [--limit-s L]")
    p = argparse.ArgumentParser(prog=f"{os.path.basename(sys.argv[0])} tune")
    for k, v in DEFAULTS.items():
        p.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    a = p.parse_args(argv[1:])
    if a.trials < 1 or a.steps < 1 or a.workers < 1:
        common.fail("--trials, --steps and --workers must be positive")
    if not (a.step_ms >= 0 and math.isfinite(a.step_ms)) or not a.limit_s > 0:
        common.fail("--step-ms must be 0 or more and --limit-s positive")
    return a


def make_pruner():
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=4, min_early_stopping_rate=0)


def make_storage(path):
    return optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(path))


def quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # JournalStorage's


def make_objective(steps, step_ms):
    pause = step_ms / 1000.0

    def objective(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        score = 0.0
        for t in range(1, steps + 1):
            time.sleep(pause)
            score = x * math.sqrt(t)
            trial.report(score, t)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return score
    return objective


def share(a, index):
    """How many of the a.trials trials worker `index` runs (the first N % W run one more)."""
    return a.trials // a.workers + (1 if index < a.trials % a.workers else 0)


def worker(index, a, path, done, ended):
    """One worker process: loads the study and runs its share of the trials, counting those finished
    in done[index] and putting its end (time.monotonic(), the same clock in every process) in
    ended[index]. The pruner is given again: a study's pruner is not kept in its storage."""
    for s in SIGNALS:  # the parent's handlers are inherited through fork: the defaults back
        signal.signal(s, signal.SIG_DFL)
    quiet_optuna()
    study = optuna.load_study(study_name=STUDY, storage=make_storage(path),
                              sampler=optuna.samplers.RandomSampler(seed=a.seed + index), pruner=make_pruner())

    def counted(_study, _trial):
        done[index] += 1
    study.optimize(make_objective(a.steps, a.step_ms), n_trials=share(a, index), callbacks=[counted])
    ended[index] = time.monotonic()


def stop(procs, grace=5.0):
    """SIGTERM to the workers still running, SIGKILL to those left after `grace` s, each join bounded;
    then any other descendant of this process. Returns the indexes of the workers that were running."""
    running = [i for i, p in enumerate(procs) if p.is_alive()]
    for i in running:
        procs[i].terminate()
    deadline = time.monotonic() + grace
    for i in running:
        procs[i].join(max(0.0, deadline - time.monotonic()))
    for i in running:
        if procs[i].is_alive():
            procs[i].kill()
            procs[i].join(2.0)
    common.end_descendants(grace=1.0)
    return running


def main():
    a = parse(sys.argv[1:])
    quiet_optuna()
    tmp = tempfile.mkdtemp(prefix="optuna-peer-tune-")
    path = os.path.join(tmp, "journal.log")
    procs = []

    def cleanup():
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)

    common.on_termination(cleanup)
    try:
        print(f"# optuna {optuna.__version__}, JournalFileStorage, {a.workers} processes ({CTX.get_start_method()}), "
              f"python {platform.python_version()}, {os.cpu_count()} hardware threads", flush=True)
        common.note(f"{a.trials} trials of up to {a.steps} steps of {a.step_ms:g} ms (sleep), "
                    f"SuccessiveHalvingPruner(min_resource=1, reduction_factor=4, min_early_stopping_rate=0), "
                    f"RandomSampler(seed={a.seed} + worker index), direction maximize")

        timer = common.watchdog(SETUP_LIMIT, "creating the study", cleanup)
        optuna.create_study(study_name=STUDY, storage=make_storage(path), direction="maximize", pruner=make_pruner())
        timer.cancel()
        timer.join()  # no thread left when forking

        done = CTX.Array("q", a.workers, lock=False)  # trials finished per worker (each writes its own slot)
        ended = CTX.Array("d", a.workers, lock=False)  # when each worker finished its share
        procs.extend(CTX.Process(target=worker, args=(i, a, path, done, ended), name=f"tune-worker-{i}")
                     for i in range(a.workers))
        t0 = time.perf_counter()
        start = time.monotonic()
        deadline = start + a.limit_s
        for p in procs:
            p.start()
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        wall = time.perf_counter() - t0

        late = [i for i, p in enumerate(procs) if p.exitcode is None]
        if late:
            names = ", ".join(f"worker {i} (pid {procs[i].pid}, {done[i]} of {share(a, i)} trials done)" for i in late)
            stop(procs)
            common.fail(f"tune: {names} not finished {a.limit_s:g} s after the workers started; terminated")
        bad = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode != 0]
        if bad:
            common.fail("tune: " + ", ".join(f"worker {i} ended with exit code {c} ({done[i]} of {share(a, i)} "
                                             f"trials done)" for i, c in bad))

        timer = common.watchdog(SETUP_LIMIT, "reading the study back", cleanup)
        trials = optuna.load_study(study_name=STUDY, storage=make_storage(path)).get_trials(deepcopy=False)
        timer.cancel()
        states = optuna.trial.TrialState
        steps = sum(len(t.intermediate_values) for t in trials)
        pruned = sum(1 for t in trials if t.state == states.PRUNED)
        complete = sum(1 for t in trials if t.state == states.COMPLETE)
        if complete + pruned != a.trials:
            common.fail(f"tune: {complete} complete + {pruned} pruned trials in the storage ({len(trials)} in all), "
                        f"expected {a.trials}")

        sleep = steps * a.step_ms / 1000.0 / a.workers
        common.note(f"{complete} trials complete, {pruned} pruned, {steps} steps reported, "
                    f"{os.path.getsize(path)} bytes of journal")
        common.note("workers done after " + ", ".join(f"{ended[i] - start:.3g} s ({share(a, i)} trials)"
                                                      for i in range(a.workers)))
        common.row("tune", "wall_s", wall, "s")
        common.row("tune", "steps", steps, "steps")
        common.row("tune", "trials_pruned", pruned, "trials")
        common.row("tune", "sleep_per_worker_s", float(sleep), "s")
        common.row("tune", "overhead_pct", 100.0 * (wall / sleep - 1.0) if sleep > 0 else math.nan, "%")
        common.row("tune", "results_per_s", steps / wall, "1/s")
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
