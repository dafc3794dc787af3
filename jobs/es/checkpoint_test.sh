#!/usr/bin/env bash
# jobs.es.checkpoint: es with --checkpoint resumes from its files instead of running again.
#   1. a first run of 5 generations executes every candidate (5 x 256 evaluations);
#   2. a rerun finds every generation's checkpoint complete: it executes none, prints the same;
#   3. with the last generation's file deleted, a rerun executes exactly that generation (256)
#      and prints the same.
# Every run checks all its fitnesses against the fitness computed in the driver without fibra
# (es exits 1 otherwise); evaluations are counted through $FIBRA_ES_EVAL_LOG (see es.cpp).
#
#   checkpoint_test.sh ES DIR
set -u
es=$1 dir=$2
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
export FIBRA_ES_EVAL_LOG=$dir/evaluations
population=256 generations=5
evaluations() { if [ -f "$FIBRA_ES_EVAL_LOG" ]; then wc -l <"$FIBRA_ES_EVAL_LOG"; else echo 0; fi; }
run() {  # run NAME: one run of es with the checkpoint; its evaluations, from a fresh log
  rm -f "$FIBRA_ES_EVAL_LOG"
  "$es" --workers 2 --generations $generations --population $population --checkpoint "$dir/es.h5" >"$dir/$1" 2>"$dir/$1.err" ||
    { cat "$dir/$1" "$dir/$1.err"; fail "run '$1' failed"; }
}

run first
n=$(evaluations)
[ "$n" -ge $((generations * population)) ] || fail "the first run evaluated $n candidates, fewer than $((generations * population))"
ls "$dir"/es-gen4.h5 >/dev/null || fail "no checkpoint of the last generation"
echo "first run: $n evaluations"

run again
n=$(evaluations)
cmp "$dir/first" "$dir/again" || fail "the resumed run printed something else"
[ "$n" = 0 ] || fail "a rerun over complete checkpoints evaluated $n candidates instead of none"
echo "rerun over complete checkpoints: 0 evaluations, same output"

rm -f "$dir"/es-gen4.h5 "$dir"/es-gen4.h5.journal
run last_lost
n=$(evaluations)
cmp "$dir/first" "$dir/last_lost" || fail "the run that redid the last generation printed something else"
[ "$n" = $population ] || fail "with the last generation's checkpoint deleted, a rerun evaluated $n candidates instead of $population"
echo "rerun without the last generation's checkpoint: $n evaluations, same output"
echo "PASS: es resumed from its checkpoints"
