#!/usr/bin/env bash
# Done-when (a) of issue 4: the driver of one checkpointed run is SIGKILLed at 10 random moments and
# rerun after each kill; the last rerun must finish with results identical (byte for byte) to an
# uninterrupted run's, and the count of task executions over all runs must stay within
#
#   inputs + kills x (window x chunksize + items that arrive in one flush interval)
#
# i.e. a kill loses at most the chunks handed out and not yet back (8 chunks of 16 items; the
# workers of the killed driver finish the batches they hold, then leave after 2 s of silence) plus
# the results since the last flush (flush interval 0.1 s; the rate is the uninterrupted run's,
# doubled for noise). The last rerun must resume: it executes fewer items than the inputs (a
# rerun that ignored the checkpoint would run all of them). The results are checked against work(x)
# computed by Python (expected_results.py), independently of fibra: the uninterrupted run's and the
# resumed run's. Only the drivers this script started are killed, by pid.
#
#   kill_test.sh CHECKPOINT_JOB [ITEMS]
set -u
job=$1
n=${2:-20000}
kills=10
window=8 chunksize=16 flush_s=0.1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FIBRA_PROGRESS=0 FIBRA_CKPT_LOG=$dir/exec.log
fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/wait_gone.sh"  # wait_gone MARK SECONDS WHAT

start=$(date +%s.%N)
"$job" "$dir/ref.h5" "$dir/ref.bin" "$n" >"$dir/ref.out" 2>&1 || { cat "$dir/ref.out"; fail "the uninterrupted run failed"; }
/usr/bin/python3 "$(dirname "$0")/expected_results.py" "$dir/ref.bin" "$n" ||
  fail "the uninterrupted run's results differ from work(x) computed by Python"
ref_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
map_s=$(sed -n 's/.* results in \([0-9.]*\) s/\1/p' "$dir/ref.out")
echo "uninterrupted run: ${ref_s} s in all, map ${map_s} s"
rm -f "$FIBRA_CKPT_LOG"

count() { wc -l 2>/dev/null <"$FIBRA_CKPT_LOG" || echo 0; }
# quiet K: waits until the workers of killed run K are gone (they finish the batches they hold, then
# leave after 2 s of silence), so that no execution of theirs is counted in the next run's progress.
quiet() { [ "$1" -lt 1 ] || wait_gone "$dir/kill$1" 30 "the workers of killed run $1"; }
landed=0
for k in $(seq 1 $kills); do
  quiet $((k - 1))
  before=$(count)
  rm -f "$dir/run.bin"
  # Every kill is a SIGKILL of this run's driver once it has executed a random number of tasks,
  # drawn from a share of the work still left (the run has at least n - executions-so-far tasks to
  # go, so the kill lands before it could finish). The task that reaches the number sends it (see
  # checkpoint_job.cpp): a shell polling the log is starved of CPU for over a second at times while
  # the workers are busy, and would land its kills late.
  target=$(awk -v r="$RANDOM" -v n="$n" -v e="$before" -v left="$((kills - k + 2))" \
    'BEGIN { s = (r / 32767) * 0.8 * (n - e) / left; if (s < 20) s = 20; printf "%d", s }')
  when="after $target tasks of this run"
  if [ $((k % 4)) = 3 ]; then
    # kills 3 and 7: from this script, at a moment in the start-up (the checkpoint may not be open
    # yet); the first task kills the driver if this script is late
    target=1
    delay=$(awk -v r="$RANDOM" -v t="$ref_s" -v m="$map_s" 'BEGIN { printf "%.3f", 0.1 + (r / 32767) * (t - m) }')
    when="$delay s after start"
  fi
  FIBRA_CKPT_KILL_AT=$((before + target)) FIBRA_CKPT_KILL_MARK=$dir/kill$k bash -c 'FIBRA_CKPT_KILL_PID=$$ exec "$@"' - \
    "$job" "$dir/run.h5" "$dir/run.bin" "$n" >"$dir/run$k.out" 2>&1 &
  pid=$!
  if [ $((k % 4)) = 3 ]; then
    sleep "$delay"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid"
  status=$?
  if [ "$status" = 137 ] && [ ! -f "$dir/run.bin" ]; then
    landed=$((landed + 1)) outcome="killed"
  else
    outcome="finished before the kill"
  fi
  echo "kill $k ($when): exit status $status ($outcome), $(count) executions so far"
  [ "$outcome" = killed ] || { cat "$dir/run$k.out"; fail "run $k was not killed (exit status $status)"; }
done

quiet "$kills"
before_last=$(count)
"$job" "$dir/run.h5" "$dir/run.bin" "$n" >"$dir/last.out" 2>&1 || { cat "$dir/last.out"; fail "the last rerun failed"; }
last_execs=$(($(count) - before_last))
echo "the last rerun executed $last_execs of $n items"
[ "$last_execs" -lt "$n" ] || fail "the last rerun executed $last_execs items for $n inputs: it did not resume"
/usr/bin/python3 "$(dirname "$0")/expected_results.py" "$dir/run.bin" "$n" ||
  fail "the resumed run's results differ from work(x) computed by Python"
cmp -s "$dir/ref.bin" "$dir/run.bin" || fail "the resumed run's results differ from the uninterrupted run's"
execs=$(wc -l <"$FIBRA_CKPT_LOG")
bound=$(awk -v n="$n" -v k="$kills" -v w="$window" -v c="$chunksize" -v f="$flush_s" -v m="$map_s" \
  'BEGIN { rate = 2 * n / m; printf "%d", n + k * (w * c + rate * f) }')
echo "executions: $execs for $n inputs over $((kills + 1)) runs (bound $bound)"
[ "$execs" -ge "$n" ] || fail "fewer executions than inputs"
[ "$execs" -le "$bound" ] || fail "more executions than the bound"
echo "PASS: results identical to the uninterrupted run after $kills kills"
