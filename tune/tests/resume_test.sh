#!/usr/bin/env bash
# An experiment whose driver is SIGKILLed once its file shows 2 trials done and a running one with a
# checkpoint, then run again: the
# rerun resumes from experiment.h5, starts none of the trials the file had as done, continues the
# running ones from their checkpoints, and ends with every trial done exactly once (8 rows each,
# iterations 1..8, none twice), read back by h5py.
# Usage: resume_test.sh <fibra_tune_resume_job> <scratch dir> <python3 with h5py>
set -euo pipefail
job=$1
dir=$2
py=$3
rm -rf "$dir" && mkdir -p "$dir"

"$job" "$dir/store" "$dir/trials.log" > "$dir/run1.out" 2>&1 &
pid=$!
# Wait (at most 120 s) for the file to show 2 trials done and a running trial with a checkpoint,
# then kill the driver outright.
"$py" - "$dir/store/experiment.h5" "$pid" <<'PY'
import os, sys, time, h5py
path, pid = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 120
while time.time() < deadline:
    try:
        with h5py.File(path, "r") as f:
            t = f["trials"]
            done = sum(s == b"done" for s in t["status"][()])
            saved = sum(s == b"running" and c >= 2 for s, c in zip(t["status"][()], t["checkpoint_iteration"][()]))
        if done >= 2 and saved >= 1:
            os.kill(pid, 9)
            print(f"killed the driver with {done} trials done in the file")
            sys.exit(0)
    except (OSError, KeyError):
        pass  # not written yet
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        print("FAIL: the run ended before it could be killed"); sys.exit(1)
    time.sleep(0.05)
print("FAIL: no 2 trials done and a checkpoint in the file within 120 s"); sys.exit(1)
PY
wait "$pid" 2>/dev/null && { echo "FAIL: the killed run exited normally"; exit 1; }
cp "$dir/store/experiment.h5" "$dir/after_kill.h5"
# The same arguments (they are part of the experiment); its log starts afresh.
mv "$dir/trials.log" "$dir/log1"

timeout -s KILL 180 "$job" "$dir/store" "$dir/trials.log" > "$dir/run2.out" 2>&1 ||
  { echo "FAIL: the rerun failed"; cat "$dir/run2.out"; exit 1; }
grep -q "fibra::tune: resuming '$dir/store/experiment.h5'" "$dir/run2.out" ||
  { echo "FAIL: the rerun did not say it resumed"; cat "$dir/run2.out"; exit 1; }

"$py" - "$dir/after_kill.h5" "$dir/store/experiment.h5" "$dir/trials.log" <<'PY'
import sys, collections, h5py
before, after, log2 = sys.argv[1:4]
with h5py.File(before, "r") as f:
    t = f["trials"]
    done_before = {int(i) for i, s in zip(t["id"][()], t["status"][()]) if s == b"done"}
    vs = dict(zip(t["id"][()].tolist(), t["config.v"][()].tolist()))
with h5py.File(after, "r") as f:
    assert f.attrs["state"] == "complete", f.attrs["state"]
    t, r = f["trials"], f["results"]
    status = [s.decode() for s in t["status"][()]]
    if status != ["done"] * 10 or t["iterations"][()].tolist() != [8] * 10:
        print("FAIL: not every trial ended done after 8 iterations:", status, t["iterations"][()].tolist()); sys.exit(1)
    rows = collections.Counter(zip(r["trial"][()].tolist(), r["iteration"][()].tolist()))
    want = {(trial, it) for trial in range(10) for it in range(1, 9)}
    if set(rows) != want or max(rows.values()) != 1:
        print("FAIL: rows are not one per trial and iteration:", sorted(k for k, n in rows.items() if n > 1), len(rows)); sys.exit(1)
    score = dict(zip(zip(r["trial"][()].tolist(), r["iteration"][()].tolist()), r["score"][()].tolist()))
    bad = [k for k in want if score[k] != vs[k[0]] * 100 + k[1]]
    if bad:
        print("FAIL: scores that a step from the wrong state made:", sorted(bad)[:10]); sys.exit(1)
started = [int(l.split("=")[1]) for l in open(log2) if l.startswith("start ")]
again = sorted({v for v in started} & {vs[i] for i in done_before})
if again:
    print("FAIL: the rerun started trials the file had as done:", again); sys.exit(1)
restored = [l.strip() for l in open(log2) if l.startswith("restore ")]
if not restored:
    print("FAIL: no trial continued from its checkpoint"); sys.exit(1)
print(f"PASS: {len(done_before)} trials done before the kill were not rerun; {len(set(started))} started again, "
      f"{len(restored)} from a checkpoint; 10 trials x 8 iterations, each row once")
PY
