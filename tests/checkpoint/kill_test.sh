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
# doubled for noise). Only the drivers this script started are killed, by pid.
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

start=$(date +%s.%N)
"$job" "$dir/ref.h5" "$dir/ref.bin" "$n" >"$dir/ref.out" 2>&1 || { cat "$dir/ref.out"; fail "the uninterrupted run failed"; }
ref_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
map_s=$(sed -n 's/.* results in \([0-9.]*\) s/\1/p' "$dir/ref.out")
echo "uninterrupted run: ${ref_s} s in all, map ${map_s} s"
rm -f "$FIBRA_CKPT_LOG"

count() { wc -l 2>/dev/null <"$FIBRA_CKPT_LOG" || echo 0; }
landed=0
for k in $(seq 1 $kills); do
  before=$(count)
  "$job" "$dir/run.h5" "$dir/run.bin" "$n" >"$dir/run$k.out" 2>&1 &
  pid=$!
  if [ $((k % 4)) = 3 ]; then
    # kills 3 and 7: a moment in the start-up (the checkpoint may not be open yet)
    delay=$(awk -v r="$RANDOM" -v t="$ref_s" -v m="$map_s" 'BEGIN { printf "%.3f", 0.1 + (r / 32767) * (t - m) }')
  else
    # the others: once tasks run, a moment within a share of the work still left (spread over the
    # kills still to come, so that each lands before the run could finish)
    for _ in $(seq 1 200); do [ "$(count)" -gt "$before" ] && break; sleep 0.05; done
    delay=$(awk -v r="$RANDOM" -v m="$map_s" -v n="$n" -v e="$(count)" -v left="$((kills - k + 2))" \
      'BEGIN { l = (n - e) / n; if (l < 0.02) l = 0.02; printf "%.3f", (r / 32767) * m * l / left }')
  fi
  sleep "$delay"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  status=$?
  done_now=$( [ -f "$dir/run.bin" ] && echo "finished before the kill" || echo "killed")
  echo "kill $k (${delay} s after $( [ $((k % 4)) = 3 ] && echo start || echo 'the first task')): exit status $status ($done_now), $(count) executions so far"
  [ "$status" = 137 ] || [ "$status" = 0 ] || { cat "$dir/run$k.out"; fail "run $k ended with status $status"; }
  [ "$status" = 137 ] && landed=$((landed + 1))
done
[ "$landed" -ge 8 ] || fail "only $landed of $kills kills landed before the run finished"

"$job" "$dir/run.h5" "$dir/run.bin" "$n" >"$dir/last.out" 2>&1 || { cat "$dir/last.out"; fail "the last rerun failed"; }
sleep 2.5  # workers of the last killed driver leave after 2 s of silence
cmp -s "$dir/ref.bin" "$dir/run.bin" || fail "the resumed run's results differ from the uninterrupted run's"
execs=$(wc -l <"$FIBRA_CKPT_LOG")
bound=$(awk -v n="$n" -v k="$kills" -v w="$window" -v c="$chunksize" -v f="$flush_s" -v m="$map_s" \
  'BEGIN { rate = 2 * n / m; printf "%d", n + k * (w * c + rate * f) }')
echo "executions: $execs for $n inputs over $((kills + 1)) runs (bound $bound)"
[ "$execs" -ge "$n" ] || fail "fewer executions than inputs"
[ "$execs" -le "$bound" ] || fail "more executions than the bound"
echo "PASS: results identical to the uninterrupted run after $kills kills"
