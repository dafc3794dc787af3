#!/usr/bin/env bash
# jobs/ppo's checkpoints (as jobs/es/resume_test.sh checks the ES job's), two ways to stop a run:
#   kill    the driver SIGKILLs itself once iteration 4 is saved (FIBRA_PPO_KILL_AFTER); the rerun,
#           on 1 rollout worker of 8 copies instead of 2 of 4, resumes from the state file;
#   signal  the driver gets SIGUSR1 (what `fibra slurm` sends before the time limit) after
#           iteration 3: it ends the iteration under way, saves it and exits 75; the rerun resumes
#           after that iteration.
# Either way the resumed run ends with the state of a run never stopped, bit for bit: every array
# of the file (the learner's weights by layer, Adam, the normaliser, the counters, the copies'
# episodes), compared by h5py, and the same curve in the CSV.
# Usage: resume_test.sh <ppo binary> <scratch dir> kill|signal
set -euo pipefail
ppo=$1
dir=$2
mode=$3
python=/usr/bin/python3
if ! "$python" -c "import h5py" 2> /dev/null; then
  echo "SKIP: $python cannot import h5py (apt-get install python3-h5py), which compares the files"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir"
# A target out of reach, so that every run spends its whole budget: 12 iterations of 2 x 4 copies
# x 32 steps, saved after each (kill), or 100, saved only at the end, for the signal: it must come
# while the run is still going, and make it save the iteration under way.
iterations=12 save_every=1
[[ $mode == signal ]] && iterations=100 save_every=1000
args=(--env cartpole --workers 2 --envs-per-worker 4 --steps 32 --total-steps $((iterations * 256)) --target 1e9
  --eval-episodes 5 --save-every $save_every)
last=$(printf "iteration %4d:" "$iterations")

fail() {
  echo "FAIL: $1"
  shift
  for f in "$@"; do
    echo "--- $f"
    cat "$f"
  done
  exit 1
}

timeout -s KILL 120 "$ppo" "${args[@]}" --state "$dir/whole.h5" --csv "$dir/whole.csv" > "$dir/whole.out" 2>&1 ||
  true # (the target is out of reach: exit status 1)
grep -q "$last" "$dir/whole.out" || fail "the uninterrupted run did not finish $iterations iterations" "$dir/whole.out"

if [[ $mode == kill ]]; then
  FIBRA_PPO_KILL_AFTER=4 timeout -s KILL 120 "$ppo" "${args[@]}" --state "$dir/cut.h5" --csv "$dir/cut.csv" \
    > "$dir/cut1.out" 2>&1 && fail "the run to be killed ended by itself" "$dir/cut1.out"
  grep -q "iteration    3:" "$dir/cut1.out" || fail "the run to be killed did not get to iteration 3" "$dir/cut1.out"
  grep -q "iteration    5:" "$dir/cut1.out" && fail "the run went on past its kill" "$dir/cut1.out"
  k=4
  # Its workers see their driver gone and leave (driver_silence_s); the rerun does not wait for
  # them. It runs on 1 worker of all 8 copies (a later option wins): same copies, same curve.
  rerun=(--workers 1 --envs-per-worker 8)
else
  "$ppo" "${args[@]}" --state "$dir/cut.h5" --csv "$dir/cut.csv" > "$dir/cut1.out" 2>&1 &
  pid=$!
  for _ in $(seq 600); do # at most 60 s for iteration 3's line
    grep -q "iteration    3:" "$dir/cut1.out" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  if ! grep -q "iteration    3:" "$dir/cut1.out"; then
    kill -KILL "$pid" 2> /dev/null || true
    fail "the run to be stopped printed no 'iteration    3:' line within 60 s" "$dir/cut1.out"
  fi
  kill -USR1 "$pid" 2> /dev/null || fail "the run ended before the signal could be sent" "$dir/cut1.out"
  for _ in $(seq 600); do # at most 60 s to save and exit
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2> /dev/null; then
    kill -KILL "$pid" 2> /dev/null || true
    fail "the run did not exit within 60 s of SIGUSR1" "$dir/cut1.out"
  fi
  rc=0
  wait "$pid" || rc=$?
  [[ $rc == 75 ]] || fail "the run stopped by SIGUSR1 exited with $rc, not 75" "$dir/cut1.out"
  grep -q "fibra: stopped by SIGUSR1: the run's state after iteration [0-9]* is in '$dir/cut.h5'" "$dir/cut1.out" ||
    fail "the stopped run did not say where its state is" "$dir/cut1.out"
  grep -q "$last" "$dir/cut1.out" && fail "the run to be stopped finished before SIGUSR1 came" "$dir/cut1.out"
  # The iteration under way when the signal came: saved, then printed, the last line.
  k=$(grep -o "^iteration *[0-9]*:" "$dir/cut1.out" | tail -1 | tr -dc 0-9)
  rerun=()
fi

timeout -s KILL 120 "$ppo" "${args[@]}" "${rerun[@]}" --state "$dir/cut.h5" --csv "$dir/cut.csv" \
  > "$dir/cut2.out" 2>&1 || true
grep -q "ppo: resuming from $dir/cut.h5 after iteration $k\$" "$dir/cut2.out" ||
  fail "the rerun did not resume after iteration $k" "$dir/cut1.out" "$dir/cut2.out"
grep -q "$last" "$dir/cut2.out" || fail "the resumed run did not finish" "$dir/cut2.out"

"$python" - "$dir/whole.h5" "$dir/cut.h5" "$dir/whole.csv" "$dir/cut.csv" "$iterations" "$mode" << 'PY'
import csv, sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
n, mode = int(sys.argv[5]), sys.argv[6]
for f in (a, b):
    assert f["trainer"]["iteration"][()] == n, f["trainer"]["iteration"][()]
assert a["learner"]["actor.0.weight"].shape == (64, 4), a["learner"]["actor.0.weight"].shape
for group in ("learner", "trainer", "copies"):
    if sorted(a[group].keys()) != sorted(b[group].keys()):
        print(f"FAIL: the files' '{group}' groups hold other arrays: {sorted(a[group])} and {sorted(b[group])}")
        sys.exit(1)
    for name in a[group]:
        x, y = a[group][name][()], b[group][name][()]
        if x.shape != y.shape or x.dtype != y.dtype or x.tobytes() != y.tobytes():
            print(f"FAIL: {group}/{name} differs between the uninterrupted and the resumed run")
            sys.exit(1)
rows = [[(r["iteration"], r["env_steps"], r["mean_return"]) for r in csv.DictReader(open(p))] for p in sys.argv[3:5]]
if len(rows[0]) != n or rows[0] != rows[1]:
    first = next((i for i, (x, y) in enumerate(zip(*rows)) if x != y), min(map(len, rows)))
    print(f"FAIL: the learning curves differ from row {first + 1} (iteration, env_steps, mean_return): "
          f"{rows[0][first:first + 3]} against {rows[1][first:first + 3]} ({len(rows[0])} and {len(rows[1])} rows)")
    sys.exit(1)
print(f"PASS: ppo resumed after {'a kill' if mode == 'kill' else 'SIGUSR1 (exit 75)'} and ended as the run never "
      f"stopped, bit for bit ({sum(a['learner'][k].size for k in a['learner'])} learner values, {n} iterations)")
PY
