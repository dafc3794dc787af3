#!/usr/bin/env bash
# SIGUSR1 (Slurm's warning before the time limit) and SIGTERM stop a checkpointed run: the driver
# flushes and exits with status 75 (SIGINT, Ctrl-C: 130, and a program's own SIGINT handler stays), under `./app` and under `mpirun -n 1 ./app` (mpirun forwards
# SIGUSR1 to the driver and returns its status); a rerun resumes: it executes exactly the items the
# stop message did not count as saved, and its results equal work(x) computed by Python
# (expected_results.py), independently of fibra. Only the processes this script started are
# signalled, by pid.
#
#   signal_test.sh CHECKPOINT_JOB MPIEXEC
set -u
job=$1
mpiexec=$2
n=20000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FIBRA_PROGRESS=0 FIBRA_CKPT_LOG=$dir/exec.log OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1
fail() { echo "FAIL: $*"; exit 1; }

"$job" "$dir/ref.h5" "$dir/ref.bin" "$n" >/dev/null 2>&1 || fail "the uninterrupted run failed"
/usr/bin/python3 "$(dirname "$0")/expected_results.py" "$dir/ref.bin" "$n" >/dev/null ||
  fail "the uninterrupted run's results differ from work(x) computed by Python"

# stop_once NAME SIGNAL LAUNCHER...: starts the job; its 3000th task sends SIGNAL to the driver or
# to its launcher (see checkpoint_job.cpp; a shell polling the log is late when the CPUs are busy).
stop_once() {
  local name=$1 sig=$2
  shift 2
  rm -f "$FIBRA_CKPT_LOG"
  # A job started in the background of a script has SIGINT ignored (fibra keeps an ignored or
  # handled SIGINT as the program set it): env gives it the default, as a terminal's job has.
  FIBRA_CKPT_KILL_AT=3000 FIBRA_CKPT_KILL_SIG=$sig FIBRA_CKPT_KILL_MARK=$dir/$name.mark \
    env --default-signal=INT bash -c 'FIBRA_CKPT_KILL_PID=$$ exec "$@"' - \
    "$@" "$job" "$dir/$name.h5" "$dir/$name.bin" "$n" >"$dir/$name.out" 2>&1 &
  local pid=$!
  wait "$pid"
  local status=$?
  local execs
  execs=$(wc -l <"$FIBRA_CKPT_LOG")
  local want=75
  [ "$sig" = INT ] && want=130  # Ctrl-C: 128 + SIGINT, no requeue
  [ "$status" = "$want" ] || { cat "$dir/$name.out"; fail "$name: exit status $status after SIG$sig, expected $want"; }
  [ ! -f "$dir/$name.bin" ] || fail "$name: the run finished before the signal; nothing was tested"
  local saved
  saved=$(sed -n "s/^fibra: stopped by SIG$sig: \([0-9]*\) of $n results are in '.*'; exiting with status $want.*/\1/p" "$dir/$name.out")
  grep -q "fibra: stopped by SIG$sig: [0-9]* of $n results are in '$dir/$name.h5'; exiting with status $want" "$dir/$name.out" &&
    [ -n "$saved" ] || { cat "$dir/$name.out"; fail "$name: no stop message"; }
  # The rerun logs its executions apart: the stopped driver's workers keep the old log.
  local rerun_log=$dir/$name.rerun.log
  FIBRA_CKPT_LOG=$rerun_log "$job" "$dir/$name.h5" "$dir/$name.bin" "$n" >/dev/null 2>&1 || fail "$name: the rerun failed"
  local rerun_execs
  rerun_execs=$(cat "$rerun_log" 2>/dev/null | wc -l)
  [ "$saved" -gt 0 ] || fail "$name: nothing was saved before the stop; the resume was not tested"
  [ "$rerun_execs" = $((n - saved)) ] ||
    fail "$name: the rerun executed $rerun_execs items, expected the $((n - saved)) that were not saved ($saved of $n were)"
  /usr/bin/python3 "$(dirname "$0")/expected_results.py" "$dir/$name.bin" "$n" >/dev/null ||
    fail "$name: the resumed results differ from work(x) computed by Python"
  echo "PASS $name: SIG$sig after $execs executions -> status $want with $saved saved; the rerun executed the other $rerun_execs"
}

# Between calls: a checkpoint was opened, no checkpointed call runs; the driver stops all the same.
rm -f "$FIBRA_CKPT_LOG"
"$job" "$dir/idle.h5" "$dir/idle.bin" 2000 --sleep-after 60 >"$dir/idle.out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "results in" "$dir/idle.out" && break; sleep 0.1; done
start=$(date +%s.%N)
kill -USR1 "$pid"
wait "$pid"
status=$?
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
[ "$status" = 75 ] || { cat "$dir/idle.out"; fail "between calls: exit status $status after SIGUSR1, expected 75"; }
grep -q "fibra: stopped by SIGUSR1: no checkpointed call was running" "$dir/idle.out" || { cat "$dir/idle.out"; fail "between calls: no stop message"; }
echo "PASS between_calls: SIGUSR1 -> status 75 after ${took} s"

stop_once usr1_singleton USR1
stop_once term_singleton TERM
stop_once usr1_mpirun USR1 "$mpiexec" -n 1
# Ctrl-C: handled like SIGTERM (flush, message, resume) but with status 130 and no requeue.
stop_once int_singleton INT

# A program that handles SIGINT itself keeps its handler: the run goes on to the end.
rm -f "$FIBRA_CKPT_LOG"
FIBRA_CKPT_KILL_AT=3000 FIBRA_CKPT_KILL_SIG=INT FIBRA_CKPT_KILL_MARK=$dir/own.mark bash -c 'FIBRA_CKPT_KILL_PID=$$ exec "$@"' - \
  "$job" "$dir/own.h5" "$dir/own.bin" "$n" --own-sigint >"$dir/own.out" 2>&1
status=$?
[ "$status" = 0 ] || { cat "$dir/own.out"; fail "own handler: exit status $status after SIGINT, expected 0 (the program's handler)"; }
grep -q "its own SIGINT handler ran" "$dir/own.out" || { cat "$dir/own.out"; fail "own handler: the program's SIGINT handler did not run"; }
[ -f "$dir/own.mark" ] || fail "own handler: the SIGINT was never sent; nothing was tested"
echo "PASS own_sigint_handler: the program's handler ran and the run finished"
