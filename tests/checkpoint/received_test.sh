#!/usr/bin/env bash
# A kill of the driver loses only what was still on the workers (issue 13): every result the
# driver had handed to the caller before a SIGKILL is in the checkpoint's journal, so no later run
# executes it again. The driver of one checkpointed imap_unordered is SIGKILLed 6 times, 3 of them
# by this script within the first second of a run (before or while the checkpoint opens), 3 by a
# task at a random count of executions; then a last run finishes. Checks:
#   - for every killed run k: no index the caller of run k was handed is executed by a later run;
#   - executions in all <= inputs + kills x window x chunksize (what can be out at a kill);
#   - the results equal work(x) computed here by Python, independently of fibra.
# Only the drivers this script started are killed, by pid.
#
#   received_test.sh CHECKPOINT_JOB [ITEMS]
set -u
job=$1
n=${2:-40000}
kills=6
window=8 chunksize=16
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FIBRA_PROGRESS=0 FIBRA_CKPT_WORK_US=100
fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/wait_gone.sh"  # wait_gone MARK SECONDS WHAT

for k in $(seq 1 $kills); do
  # The log of this run's executions, also after the kill: the killed driver's workers finish the
  # batches they hold, then leave after 2 s of silence. Wait for them before the next run.
  export FIBRA_CKPT_LOG=$dir/count$k.log FIBRA_CKPT_INDEX_LOG=$dir/exec$k.log
  rm -f "$dir/run.bin"
  if [ "$k" -le 3 ]; then
    # 0.2 to 1.2 s after start: during the start-up of the pool (about 0.7 s here) or in the
    # first half second of work
    delay=$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", 0.2 + (r / 32767) * 1.0 }')
    when="$delay s after start"
    target=1000000000
  else
    done_so_far=$(cat "$dir"/got*.log 2>/dev/null | sort -u | wc -l)
    target=$(awk -v r="$RANDOM" -v n="$n" -v d="$done_so_far" 'BEGIN { s = (r / 32767) * 0.5 * (n - d); if (s < 20) s = 20; printf "%d", s }')
    when="after $target executions"
  fi
  FIBRA_CKPT_KILL_AT=$target FIBRA_CKPT_KILL_MARK=$dir/kill$k bash -c 'FIBRA_CKPT_KILL_PID=$$ exec "$@"' - \
    "$job" "$dir/run.h5" "$dir/run.bin" "$n" --received "$dir/got$k.log" >"$dir/run$k.out" 2>&1 &
  pid=$!
  if [ "$k" -le 3 ]; then
    sleep "$delay"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid"
  status=$?
  [ "$status" = 137 ] && [ ! -f "$dir/run.bin" ] || { cat "$dir/run$k.out"; fail "run $k was not killed (exit status $status)"; }
  # the killed driver's workers finish what they hold and leave (driver_silence_s = 2)
  wait_gone "$dir/kill$k" 30 "the workers of killed run $k"
  touch "$dir/got$k.log" "$dir/exec$k.log"
  echo "kill $k ($when): handed to the caller $(wc -l <"$dir/got$k.log"), executed $(wc -l <"$dir/exec$k.log")"
done

export FIBRA_CKPT_LOG=$dir/count_last.log FIBRA_CKPT_INDEX_LOG=$dir/exec_last.log
"$job" "$dir/run.h5" "$dir/run.bin" "$n" --received "$dir/got_last.log" >"$dir/last.out" 2>&1 ||
  { cat "$dir/last.out"; fail "the last run failed"; }
touch "$dir/exec_last.log"

# No index handed to the caller of run k is executed again by a later run.
for k in $(seq 1 $kills); do
  later=$(for j in $(seq $((k + 1)) $kills) _last; do cat "$dir/exec$j.log"; done | sort -u)
  again=$(comm -12 <(sort -u "$dir/got$k.log") <(echo "$later") | head -5)
  [ -z "$again" ] || fail "results handed to the caller of run $k were executed again later (indices: $(echo $again))"
done
execs=$(cat "$dir"/exec*.log | wc -l)
bound=$((n + kills * window * chunksize))
echo "executions: $execs for $n inputs over $((kills + 1)) runs (bound $bound)"
[ "$execs" -ge "$n" ] || fail "fewer executions than inputs"
[ "$execs" -le "$bound" ] || fail "more executions than inputs plus what can be out at each kill"

/usr/bin/python3 "$(dirname "$0")/expected_results.py" "$dir/run.bin" "$n" ||
  fail "the results differ from work(x) computed by Python"
echo "PASS: no result handed to a caller ran again after $kills kills"
