"""What the runners of whole programs share (benchmarks/es_scaling.py, benchmarks/b11_ppo.py and
benchmarks/suite.py): the environment a run gets, stopping a run's process group, and a signal
turned into an exception that stops the run under way."""
import os
import signal
import subprocess
import time


class Stopped(Exception):
    """A signal arrived: the running program is stopped (by the caller's finally) and this one exits."""

    def __init__(self, signum):
        super().__init__(f"signal {signum}")
        self.signum = signum


def on_signal(signum, _frame):
    raise Stopped(signum)  # out of the wait for the run, whose finally stops the program


def run_env():
    """The environment of a run: MPI as root and oversubscribed, fibra quiet, one thread per process,
    and no state file (`FIBRA_CHECKPOINT` would make a job resume: nothing but its own run is timed)."""
    e = dict(os.environ)
    for k, v in {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "EVENT_NOEPOLL": "1",
                 "OMPI_MCA_rmaps_base_oversubscribe": "1", "FIBRA_PROGRESS": "0", "PYTHONDONTWRITEBYTECODE": "1",
                 "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}.items():
        e.setdefault(k, v)
    e.pop("FIBRA_CHECKPOINT", None)
    return e


def stop_group(proc):
    """SIGTERM to the run's process group if its leader is still running, SIGKILL after 10 s; then
    SIGKILL to whatever is left in the group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_program(cmd, cwd, limit_s):
    """Runs `cmd` in `cwd` (its own process group, run_env()'s environment) for at most `limit_s`
    seconds: (exit status or None past the limit, stdout and stderr together, seconds it took).
    Whatever of its group is left afterwards is stopped, also when a signal (Stopped) ends the wait."""
    with open(os.path.join(cwd, "out"), "w+") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=run_env(), cwd=cwd,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            stop_group(proc)
        seconds = time.monotonic() - t0
        out.seek(0)
        return rc, out.read(), seconds
