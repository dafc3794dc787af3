#!/usr/bin/env bash
# A run of the ES job killed mid-way (SIGKILL of the driver after generation 3) and run again, on
# 3 workers instead of 2, resumes from its state file and ends with the same policy, bit for bit,
# as a run never stopped with the same seed; its learning curve matches too. h5py (Debian's
# python3) reads both files.
# Usage: resume_test.sh <es binary> <scratch dir> [more es options, e.g. --env pendulum]
set -euo pipefail
es=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
# A budget that does not solve the task, so that both runs do all 6 generations.
args=(--workers 2 --population 32 --generations 6 --target 1e9 --eval-episodes 5 --seed 7 "${@:3}")

timeout -s KILL 120 "$es" "${args[@]}" --state "$dir/whole.h5" --csv "$dir/whole.csv" > "$dir/whole.out" 2>&1 ||
  true  # the target is out of reach: exit status 1
grep -q "generation   6:" "$dir/whole.out" || { echo "FAIL: the uninterrupted run did not finish 6 generations"; cat "$dir/whole.out"; exit 1; }

# The driver kills itself (SIGKILL) once generation 3 is saved: FIBRA_ES_KILL_AFTER.
FIBRA_ES_KILL_AFTER=3 timeout -s KILL 120 "$es" "${args[@]}" --state "$dir/cut.h5" --csv "$dir/cut.csv" \
  > "$dir/cut1.out" 2>&1 && { echo "FAIL: the run to be killed ended by itself"; cat "$dir/cut1.out"; exit 1; }
grep -q "generation   4:" "$dir/cut1.out" && { echo "FAIL: the run went on past its kill"; exit 1; }
# Its workers see their driver gone and leave (driver_silence_s); the rerun does not wait for them.
# The rerun on 3 workers (a later option wins): the curve depends on the seed alone, not on how
# many workers run it.
timeout -s KILL 120 "$es" "${args[@]}" --workers 3 --state "$dir/cut.h5" --csv "$dir/cut.csv" \
  > "$dir/cut2.out" 2>&1 || true
grep -q "resuming from $dir/cut.h5 after generation 3" "$dir/cut2.out" ||
  { echo "FAIL: the rerun did not resume from the state file"; cat "$dir/cut2.out"; exit 1; }
grep -q "generation   6:" "$dir/cut2.out" || { echo "FAIL: the resumed run did not finish"; cat "$dir/cut2.out"; exit 1; }

# A state file as the job wrote them before it kept the steps (a curve of 4 columns; no shift,
# observe or steps attributes), made from the finished run's: it resumes (seventh generation).
if [ $# -eq 2 ]; then
  /usr/bin/python3 - "$dir/whole.h5" "$dir/old.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "w") as b:
    for name, value in a.attrs.items():
        if name not in ("shift", "observe", "steps"):
            b.attrs[name] = value
    for name in a:
        b[name] = a[name][()][:, :4] if name == "curve" else a[name][()]
PY
  timeout -s KILL 120 "$es" "${args[@]}" --generations 7 --state "$dir/old.h5" --csv "$dir/old.csv" \
    > "$dir/old.out" 2>&1 || true
  grep -q "resuming from $dir/old.h5 after generation 6" "$dir/old.out" && grep -q "generation   7:" "$dir/old.out" ||
    { echo "FAIL: a state file of the older format did not resume"; cat "$dir/old.out"; exit 1; }
fi

/usr/bin/python3 - "$dir/whole.h5" "$dir/cut.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
assert a.attrs["generation"] == 6 and b.attrs["generation"] == 6, (a.attrs["generation"], b.attrs["generation"])
for name in ("theta", "adam_m", "adam_v", "obs_sum", "obs_sumsq"):
    x, y = a[name][()], b[name][()]
    if x.shape != y.shape or x.tobytes() != y.tobytes():
        print(f"FAIL: {name} differs between the uninterrupted and the resumed run (max {np.max(np.abs(x - y))})")
        sys.exit(1)
ca, cb = a["curve"][()], b["curve"][()]
# generation, mean, best and the steps so far (column 4); the wall time (column 3) differs.
kept = [0, 1, 2, 4]
if ca.shape != (6, 5) or not np.array_equal(ca[:, kept], cb[:, kept]) or not (ca[:, 4] > 0).all():
    print("FAIL: the learning curves differ:", ca[:, kept].tolist(), cb[:, kept].tolist())
    sys.exit(1)
print(f"PASS: es resumed after a kill and ended with the same policy ({a['theta'].shape[0]} parameters, bit for bit)")
PY
