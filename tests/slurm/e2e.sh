#!/usr/bin/env bash
# End-to-end Slurm tests on the local cluster the ctest fixture started (SLURM_CONF points at it).
#   e2e.sh CASE FIBRA SWEEP WORK
# CASE: map | requeue | requeue-pool | early-signal | relaunch | array | errors | es | ppo | tune
# FIBRA: the `fibra` command; SWEEP: tests/slurm/fibra_slurm_sweep; WORK: a scratch folder.
# Each case writes a job spec, submits it with `fibra slurm submit`, and checks the results exactly.
set -euo pipefail
case_name="$1" fibra="$2" sweep="$3" work="$4/$1"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
: "${SLURM_CONF:?the slurm cluster fixture did not set SLURM_CONF}"

fail() { echo "FAIL: $*" >&2; for f in "$work"/*.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done >&2; exit 1; }

# Exact result line of the sweep program for N items starting at FIRST: the sum of their cubes.
expected() { python3 -c "import sys; n, f = int(sys.argv[1]), int(sys.argv[2]); print(f'sweep: items={n} first={f} sum={sum(i**3 for i in range(f, f + n))}')" "$1" "$2"; }

# The [job] table of a sweep spec. SWEEP_ITEM_MS (env) slows each item down.
spec_header() {  # name workers args...
  local name="$1" workers="$2"; shift 2
  local args="" a
  for a in "$@"; do args+="${args:+, }\"$a\""; done
  printf '[job]\nname = "%s"\nprogram = "%s"\nargs = [%s]\nworkers = %s\nenv = { FIBRA_PROGRESS = "0", SWEEP_ITEM_MS = "%s" }\n' \
    "$name" "$sweep" "$args" "$workers" "${SWEEP_ITEM_MS:-0}"
}

# Checks that slurmctld holds job $1 as requeueable: the local cluster requeues only jobs submitted
# with --requeue (JobRequeue=0 in its slurm.conf), so a script rendered without it cannot resume.
requeueable() {
  scontrol -o show job "$1" | grep -qw "Requeue=1" ||
    { scancel "$1"; fail "job $1 is not requeueable (scontrol show job: $(scontrol -o show job "$1" | grep -o 'Requeue=[0-9]*')): its script lacks '#SBATCH --requeue'"; }
}

case_map() {
  { spec_header map 3 --items 300 --workers 3; printf 'events = "map-events"\n[resources]\ntime = "5:00"\n'; } >map.toml
  local out status
  out="$(timeout 90 "$fibra" slurm submit map.toml --wait)" || fail "submit --wait exited $?: $out"
  local id="${out%%$'\n'*}"
  grep -qx "job $id 'map': COMPLETED, exit code 0, restarts 0" <<<"$out" || fail "unexpected final status: $out"
  grep -qx "$(expected 300 0)" "map-$id.out" || fail "map-$id.out lacks '$(expected 300 0)'"
  grep -qx "sweep: 3 workers, 300 items from 0, mode plain, run 0" "map-$id.out" || fail "not 3 workers"
  # Its event log (job.events), as `fibra status` reads it, under the job's line.
  status="$("$fibra" slurm status "$id")"
  [ "$(head -n 2 <<<"$status")" = "job $id 'map': COMPLETED, exit code 0, restarts 0"$'\n'"events: $work/map-events" ] ||
    fail "status: $status"
  grep -Eq '^  run +fibra_slurm_sw.* ended: ' <<<"$status" || fail "status does not say the run ended: $status"
  grep -qx '  items      300 of 300 queued done (100.0%)' <<<"$status" || fail "status does not count 300 items done: $status"
  [ "$(tail -n 1 <<<"$status")" = "checkpoint: none" ] || fail "status: $status"
}

# A demo job that learns CartPole-v1 through `fibra slurm submit --wait`: NAME, PROGRAM, its ARGS (a
# TOML list's items) and WORKERS; its state where the spec's checkpoint says ($FIBRA_CHECKPOINT,
# which the script sets: WORK/NAME.ckpt). Checks that it completed at once, and prints its job id.
submit_learner() {
  printf '[job]\nname = "%s"\nprogram = "%s"\nargs = [%s]\nworkers = %s\nenv = { FIBRA_PROGRESS = "0" }\n[resources]\ntime = "5:00"\n[checkpoint]\npath = "%s/%s.ckpt"\n' \
    "$1" "$2" "$3" "$4" "$work" "$1" >"$1.toml"
  local out id
  out="$(timeout 120 "$fibra" slurm submit "$1.toml" --wait)" || fail "submit --wait exited $?: $out"
  id="${out%%$'\n'*}"
  grep -qx "job $id '$1': COMPLETED, exit code 0, restarts 0" <<<"$out" || fail "unexpected final status: $out"
  echo "$id"
}

# The ES demo job: it solves CartPole-v1 inside the allocation, its state in its checkpoint.
case_es() {
  local es="${FIBRA_E2E_ES:?FIBRA_E2E_ES, the path of the es job, is not set}" id
  id="$(submit_learner es "$es" '"--workers", "2", "--population", "64", "--generations", "60"' 2)"
  grep -q "over 100 episodes, target 475: reached" "es-$id.out" || fail "es-$id.out does not say the target was reached"
  /usr/bin/python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r'); sys.exit(0 if f.attrs['generation'] > 0 else 1)" \
    "$work/es.ckpt.h5" || fail "no ES state in $work/es.ckpt.h5"
}

# PPO (jobs/ppo): it solves CartPole-v1 inside the allocation, its rollout workers fibra actors
# beside the pool's one worker, its state in its checkpoint.
case_ppo() {
  local ppo="${FIBRA_E2E_PPO:?FIBRA_E2E_PPO, the path of the ppo job, is not set}" id
  id="$(submit_learner ppo "$ppo" '"--env", "cartpole", "--workers", "2", "--envs-per-worker", "4", "--total-steps", "100000"' 1)"
  grep -q "^ppo: CartPole-v1 solved in" "ppo-$id.out" || fail "ppo-$id.out does not say CartPole-v1 was solved"
  ls "$work"/ppo.ckpt* >/dev/null 2>&1 || fail "no PPO state at $work/ppo.ckpt*"
}

# USR1 mid-run: the driver stops, the script requeues, the second run resumes and the result equals
# an uninterrupted run's. The first run has 3 s of work after it first writes its checkpoint: room
# for this shell's poll and slurmctld's delivery on a busy machine. $1: the sweep mode (self-checkpoint, or pool-checkpoint once it exists).
case_requeue() {
  local mode="$1" name="requeue"
  { SWEEP_ITEM_MS=30 spec_header "$name" 2 --items 200 --workers 2 --batch 10 --mode "$mode"
    printf '[resources]\ntime = "5:00"\n[checkpoint]\npath = "%s/run.ckpt"\ngrace = 30\nrequeue = true\n' "$work"
  } >"$name.toml"
  local id out="" i
  id="$("$fibra" slurm submit "$name.toml")" || fail "submit"
  requeueable "$id"
  for i in $(seq 1 150); do  # wait until the first run has done some work
    grep -q "mode $mode, run 0" "$name-$id.out" 2>/dev/null && [ -s run.ckpt ] && break
    sleep 0.2
  done
  [ -s run.ckpt ] || { scancel "$id"; fail "the first run made no progress"; }
  scancel --batch --signal=USR1 "$id"
  timeout 90 bash -c 'until scontrol -o show job "$0" | grep -Eq "JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT)"; do sleep 0.5; done' "$id" ||
    { scancel "$id"; fail "job $id did not finish within 90 s"; }
  out="$(cat "$name-$id.out")"
  if [ "$mode" = pool-checkpoint ]; then  # the Pool's own stop message, then its resume
    grep -q "^fibra: stopped by SIGUSR1: [0-9]* of 200 results are in '[^']*run.ckpt'; exiting with status 75" <<<"$out" ||
      fail "the driver did not stop for a checkpoint"
  else
    grep -q "^sweep: stopping for a checkpoint at item [0-9]*$" <<<"$out" || fail "the driver did not stop for a checkpoint"
  fi
  grep -qx "fibra: the driver stopped for a checkpoint; requeueing job $id" <<<"$out" || fail "no requeue"
  ! grep -q "'scontrol requeue $id' failed" <<<"$out" || fail "slurmctld refused to requeue job $id"
  grep -Eq "^sweep: resuming (at item [1-9][0-9]*|with [1-9][0-9]* of 200 items done)$" <<<"$out" ||
    fail "the second run did not resume"
  grep -qx "$(expected 200 0)" <<<"$out" || fail "result differs from an uninterrupted run: want '$(expected 200 0)'"
  [ "$(grep -c '^sweep: items=' <<<"$out")" = 1 ] || fail "more than one result line"
  "$fibra" slurm status "$id" | grep -qx "job $id 'requeue': COMPLETED, exit code 0, restarts 1" ||
    fail "status: $("$fibra" slurm status "$id")"
  if [ "$mode" = pool-checkpoint ]; then  # status reads the progress from the checkpoint itself
    "$fibra" slurm status "$id" | grep -Eq "^checkpoint: .*run\.ckpt: 200/200 items of [a-z_]+ done \(100\.0%\), complete, updated " ||
      fail "status: $("$fibra" slurm status "$id")"
  fi
}

# fibra::tune's experiment through `fibra slurm submit`: USR1 mid-search (2 trials done in its
# file), the driver writes experiment.h5 and exits 75, the script requeues, the second run resumes
# from the file and ends with every trial done once (10 trials x 8 rows, each once; h5py checks).
case_tune() {
  local job="${FIBRA_E2E_TUNE:?FIBRA_E2E_TUNE, the path of fibra_tune_resume_job, is not set}"
  printf '[job]\nname = "tune"\nprogram = "%s"\nargs = ["%s/store", "%s/trials.log"]\nworkers = 2\nenv = { FIBRA_PROGRESS = "0" }\n[resources]\ntime = "5:00"\n[checkpoint]\npath = "%s/unused.ckpt"\ngrace = 30\nrequeue = true\n' \
    "$job" "$work" "$work" "$work" >tune.toml
  local id out i
  id="$("$fibra" slurm submit tune.toml)" || fail "submit"
  requeueable "$id"
  # Until 16 of the 80 results are in (2 trials' worth): results.csv, rewritten whole at each flush
  # (0.2 s), is read in no time, where starting Python and h5py for each look took seconds on a
  # loaded machine and once missed the 6 s run entirely.
  for i in $(seq 1 1200); do
    [ "$(wc -l <"$work/store/results.csv" 2>/dev/null || echo 0)" -ge 17 ] && break
    sleep 0.1
  done
  scontrol -o show job "$id" | grep -q "JobState=RUNNING" ||
    fail "job $id was no longer running when 16 results were in (this test needs the 6 s experiment still under way)"
  scancel --batch --signal=USR1 "$id"
  timeout 120 bash -c 'until scontrol -o show job "$0" | grep -Eq "JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT)"; do sleep 0.5; done' "$id" ||
    { scancel "$id"; fail "job $id did not finish within 120 s"; }
  out="$(cat "tune-$id.out")"
  grep -q "^fibra: stopped by SIGUSR1: the experiment's file '[^']*experiment.h5' holds every result so far; exiting with status 75" <<<"$out" ||
    fail "the driver did not stop and write the experiment's file"
  grep -qx "fibra: the driver stopped for a checkpoint; requeueing job $id" <<<"$out" || fail "no requeue"
  grep -q "^fibra::tune: resuming '[^']*experiment.h5'" <<<"$out" || fail "the second run did not resume"
  grep -qx "finished: 10 trials, 80 rows, best v=9" <<<"$out" || fail "the second run did not end with every trial"
  /usr/bin/python3 - "$work/store/experiment.h5" <<'PY' || fail "the experiment's file is not every trial once"
import sys, collections, h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["state"] == "complete", f.attrs["state"]
r = f["results"]
rows = collections.Counter(zip(r["trial"][()].tolist(), r["iteration"][()].tolist()))
assert set(rows) == {(t, i) for t in range(10) for i in range(1, 9)} and max(rows.values()) == 1, rows
PY
  "$fibra" slurm status "$id" | grep -q "^job $id 'tune': COMPLETED, exit code 0, restarts 1" ||
    fail "status: $("$fibra" slurm status "$id")"
}

# The warning comes while the driver of the first run has not started fibra::Runtime (so has no
# handler yet): it must neither kill the driver nor be lost. The batch shell sends it again until
# the driver takes it; the run stops for a checkpoint, requeues, and the second run finishes. Its map
# takes 4 s, so that one of the warnings resent every 2 s lands before it ends.
case_early_signal() {
  local name="early"
  { SWEEP_ITEM_MS=40 spec_header "$name" 2 --items 200 --workers 2 --batch 10 --mode pool-checkpoint --start-delay 4
    printf '[resources]\ntime = "5:00"\n[checkpoint]\npath = "%s/run.ckpt"\ngrace = 30\nrequeue = true\n' "$work"
  } >"$name.toml"
  local id out="" i
  id="$("$fibra" slurm submit "$name.toml")" || fail "submit"
  requeueable "$id"
  for i in $(seq 1 150); do  # the driver is sleeping before fibra::Runtime
    grep -q "^sweep: start-up delay" "$name-$id.out" 2>/dev/null && break
    sleep 0.2
  done
  grep -q "^sweep: start-up delay" "$name-$id.out" || { scancel "$id"; fail "the driver did not start"; }
  scancel --batch --signal=USR1 "$id"
  timeout 90 bash -c 'until scontrol -o show job "$0" | grep -Eq "JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT)"; do sleep 0.5; done' "$id" ||
    { scancel "$id"; fail "job $id did not finish within 90 s"; }
  out="$(cat "$name-$id.out")"
  grep -q "^fibra: batch shell got SIGUSR1" <<<"$out" || fail "the batch shell did not get the signal"
  grep -q "^fibra: stopped by SIGUSR1: " <<<"$out" || fail "the driver did not stop for a checkpoint"
  grep -qx "fibra: the driver stopped for a checkpoint; requeueing job $id" <<<"$out" || fail "no requeue"
  grep -qx "$(expected 200 0)" <<<"$out" || fail "result differs from an uninterrupted run: want '$(expected 200 0)'"
  [ "$(grep -c '^sweep: items=' <<<"$out")" = 1 ] || fail "more than one result line"
  "$fibra" slurm status "$id" | grep -qx "job $id '$name': COMPLETED, exit code 0, restarts 1" ||
    fail "status: $("$fibra" slurm status "$id")"
}

# The driver is SIGKILLed mid-run (status 137; no node is lost): a script with checkpoint.relaunches
# runs it again in the same allocation, which resumes from the checkpoint; the result equals an
# uninterrupted run's.
case_relaunch() {
  local name="relaunch"
  { SWEEP_ITEM_MS=30 spec_header "$name" 2 --items 400 --workers 2 --batch 10 --mode pool-checkpoint
    printf '[resources]\ntime = "5:00"\n[checkpoint]\npath = "%s/run.ckpt"\nrelaunches = 1\n' "$work"
  } >"$name.toml"
  local id out="" i pidfile="" pid
  id="$("$fibra" slurm submit "$name.toml")" || fail "submit"
  for i in $(seq 1 150); do  # wait until the first run has results in its checkpoint
    pidfile="$(ls "${TMPDIR:-/tmp}/fibra-$id-"*.pid 2>/dev/null | head -n 1 || true)"
    [ -n "$pidfile" ] && "$fibra" slurm status "$id" 2>/dev/null | grep -Eq '^checkpoint: .*: [1-9][0-9]*/400 items' && break
    sleep 0.2
  done
  [ -n "$pidfile" ] && [ -s run.ckpt ] || { scancel "$id"; fail "the first run made no progress"; }
  pid="$(cat "$pidfile" 2>/dev/null)" && kill -KILL "$pid" || { scancel "$id"; fail "the driver ended before it could be killed"; }
  timeout 120 bash -c 'until scontrol -o show job "$0" | grep -Eq "JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT)"; do sleep 0.5; done' "$id" ||
    { scancel "$id"; fail "job $id did not finish within 120 s"; }
  out="$(cat "$name-$id.out")"
  grep -Eq "^fibra: the driver ended with status 137 at [0-9:]+Z; relaunch 1 of 1 on [^ ]+ at " <<<"$out" ||
    fail "no relaunch after the driver was killed"
  grep -Eq "^sweep: resuming with [1-9][0-9]* of 400 items done$" <<<"$out" || fail "the relaunched driver did not resume"
  grep -qx "$(expected 400 0)" <<<"$out" || fail "result differs from an uninterrupted run: want '$(expected 400 0)'"
  [ "$(grep -c '^sweep: items=' <<<"$out")" = 1 ] || fail "more than one result line"
  "$fibra" slurm status "$id" | grep -qx "job $id '$name': COMPLETED, exit code 0, restarts 0" ||
    fail "status: $("$fibra" slurm status "$id")"
}

case_array() {
  # Each task keeps its own checkpoint (%a), given as a path relative to the job's folder.
  { spec_header sweep 2 --items 50 --workers 2 --mode pool-checkpoint
    printf '[resources]\ntime = "5:00"\n[array]\nindices = "0-3"\nthrottle = 2\n[checkpoint]\npath = "sweep-%%a.ckpt"\n'
  } >array.toml
  local out id t status
  out="$(timeout 120 "$fibra" slurm submit array.toml --wait)" || fail "submit --wait exited $?: $out"
  id="${out%%$'\n'*}"
  [ "$(grep -c "COMPLETED, exit code 0" <<<"$out")" = 4 ] || fail "not 4 completed tasks: $out"
  for t in 0 1 2 3; do
    grep -qx "$(expected 50 $((t * 1000)))" "sweep-${id}_$t.out" || fail "task $t: want '$(expected 50 $((t * 1000)))'"
  done
  # status, asked from another folder, finds every task's checkpoint in the job's folder
  status="$(cd / && "$fibra" slurm status "$id")" || fail "status exited $?: $status"
  for t in 0 1 2 3; do
    grep -Eq "^checkpoint: $work/sweep-$t\.ckpt: 50/50 items of cube done \(100\.0%\), complete, updated " <<<"$status" ||
      fail "status lacks task $t's checkpoint: $status"
  done
}

case_errors() {
  { spec_header nope 1; printf '[resources]\npartition = "nope"\n'; } >nope.toml
  local err rc=0
  err="$("$fibra" slurm submit nope.toml 2>&1)" || rc=$?
  [ "$rc" = 1 ] || fail "exit status $rc, want 1"
  [ "$err" = "fibra slurm: sbatch refused job 'nope' (nope.toml): partition 'nope' does not exist on this cluster; 'sinfo -s' lists the partitions [sbatch: Invalid partition name specified]" ] ||
    fail "message: $err"
  { spec_header long 1; printf '[resources]\ntime = "2:00:00"\n'; } >long.toml
  rc=0
  err="$("$fibra" slurm submit long.toml 2>&1)" || rc=$?
  [ "$rc" = 1 ] || fail "exit status $rc, want 1"
  [ "$err" = "fibra slurm: sbatch refused job 'long' (long.toml): the time limit '2:00:00' is more than partition (the default) allows; 'sinfo -o \"%P %l\"' shows each partition's limit [sbatch: Requested time limit is invalid (missing or exceeds some limit)]" ] ||
    fail "message: $err"
  rc=0
  err="$("$fibra" slurm status 999999 2>&1)" || rc=$?
  [ "$rc" = 1 ] && [ "$err" = "fibra slurm: job 999999 is not known to slurmctld (a wrong id, or it ended longer ago than MinJobAge)" ] ||
    fail "status of an unknown job ($rc): $err"
}

case "$case_name" in
  map) case_map ;;
  requeue) case_requeue self-checkpoint ;;
  requeue-pool) case_requeue pool-checkpoint ;;
  early-signal) case_early_signal ;;
  relaunch) case_relaunch ;;
  array) case_array ;;
  errors) case_errors ;;
  es) case_es ;;
  ppo) case_ppo ;;
  tune) case_tune ;;
  *) echo "e2e.sh: unknown case '$case_name'" >&2; exit 2 ;;
esac
echo "PASS: $case_name"
