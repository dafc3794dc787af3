#!/usr/bin/env bash
# A result the caller was handed is in the checkpoint's journal at once, not at the next flush
# (issue 13; issue 23, item 8). received_test.sh checks it over 6 kills at random moments with the
# job's flush every 0.1 s, so what it can catch is the tail since the last flush. Here the flush
# never comes (--flush 3600) and the one kill is exact: a task SIGKILLs the driver at execution
# KILL_AT of N. Whatever the caller of the killed run was handed must then be done in the
# checkpoint: the rerun executes none of it again, and its results equal work(x) computed by Python.
# Only the driver this script started is killed, by pid.
#
#   received_at_kill_test.sh CHECKPOINT_JOB [N] [KILL_AT]
set -u
job=$1
n=${2:-4000}
kill_at=${3:-2000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FIBRA_PROGRESS=0 FIBRA_CKPT_WORK_US=100
fail() { echo "FAIL: $*"; exit 1; }

export FIBRA_CKPT_LOG=$dir/count1.log FIBRA_CKPT_INDEX_LOG=$dir/exec1.log
# bounded: a run that no task kills is ended after 60 s (then without the kill mark)
# (in a subshell whose stderr is dropped: bash's "Killed" notice is expected)
(FIBRA_CKPT_KILL_AT=$kill_at FIBRA_CKPT_KILL_MARK=$dir/kill1 timeout -s KILL 60 bash -c 'FIBRA_CKPT_KILL_PID=$$ exec "$@"' - \
  "$job" "$dir/run.h5" "$dir/run.bin" "$n" --flush 3600 --received "$dir/got1.log" >"$dir/run1.out" 2>&1) 2>/dev/null
status=$?
[ -f "$dir/kill1" ] && [ "$status" = 137 ] && [ ! -f "$dir/run.bin" ] ||
  { cat "$dir/run1.out"; fail "the first run was not killed at execution $kill_at (exit status $status)"; }
touch "$dir/got1.log"
got=$(wc -l <"$dir/got1.log")
echo "killed at execution $kill_at of $n: the caller had been handed $got results"
[ "$got" -ge 100 ] || fail "the caller was handed only $got results before the kill: nothing to check"
sleep 2  # the killed driver's workers finish what they hold and leave (driver_silence_s = 2)

export FIBRA_CKPT_LOG=$dir/count2.log FIBRA_CKPT_INDEX_LOG=$dir/exec2.log
timeout 60 "$job" "$dir/run.h5" "$dir/run.bin" "$n" --flush 3600 --received "$dir/got2.log" >"$dir/run2.out" 2>&1 ||
  { cat "$dir/run2.out"; fail "the rerun failed"; }
touch "$dir/exec2.log"
again=$(comm -12 <(sort -u "$dir/got1.log") <(sort -u "$dir/exec2.log"))
if [ -n "$again" ]; then
  fail "$(wc -l <<<"$again") of the $got results handed to the caller before the SIGKILL were not in the" \
    "checkpoint: the rerun executed them again (indices: $(head -5 <<<"$again" | paste -sd ' ' -) ...)"
fi
/usr/bin/python3 "$(dirname "$0")/expected_results.py" "$dir/run.bin" "$n" ||
  fail "the results differ from work(x) computed by Python"
echo "PASS: the $got results handed to the caller before a SIGKILL were all in the checkpoint"
