#!/usr/bin/env bash
# Many-node tests on a virtual Slurm cluster of 3 nodes (slurm/virtual-cluster.sh) on this machine.
#   run.sh spread|pack|silence|relaunch|queue_readers|locks|elastic|es <program> <work dir> [<fibra command>]
# spread takes FIBRA_MN_NODES (3) and FIBRA_MN_WORKERS (6) from the environment: with 4 and 64 it
# is the many-node scale figure of docs/benchmarks.md.
# Starts the cluster (its own folder and ports), runs the program in a 3-node job with
# `mpirun -n 1` (as fibra's Slurm scripts do), checks its verdict, and stops the cluster, leaving
# nothing behind. Exit 77 when this machine cannot host the cluster (counted as skipped).
set -uo pipefail
what="$1" program="$2" work="$3" fibra="${4:-}"
here="$(cd "$(dirname "$0")" && pwd)"
vc="$here/../../slurm/virtual-cluster.sh"
mn_nodes="${FIBRA_MN_NODES:-3}" mn_workers="${FIBRA_MN_WORKERS:-6}"
export FIBRA_VC_DIR="$work/cluster" FIBRA_VC_PORT=6927 FIBRA_VC_NODES="$mn_nodes" FIBRA_VC_CPUS=4
reason="$("$vc" check)" || { echo "SKIP: $reason"; exit 77; }
mkdir -p "$work"
cleanup() { "$vc" stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
started="$("$vc" start)" || { echo "FAIL: the virtual cluster did not start"; exit 1; }
# A job's JobState, empty when slurmctld does not say.
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
# Polls job $1 every 0.5 s, at most $2 times, until it has ended (--wait would hold the test
# without a bound); leaves its JobState in $state.
wait_job() {
  for _ in $(seq 1 "$2"); do
    state="$(job_state "$1")"
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) return ;; esac
    sleep 0.5
  done
}
eval "$started"
[ "${SLURM_CONF:-}" = "$FIBRA_VC_DIR/slurm.conf" ] || { echo "FAIL: the virtual cluster gave no SLURM_CONF"; exit 1; }

case "$what" in
  spread|pack)
    # spread: 2 tasks per node, agents on every node; pack: 3 per node (a CPU each) and 4 workers of
    # an agent each, so that the driver and 2 workers fill vnode1, 2 go to vnode2, and vnode3 stays empty.
    out="$work/$what.out"
    rm -f "$out"
    per_node=2 expect_nodes="$mn_nodes" workers="$mn_workers"
    [ "$what" = pack ] && per_node=3 expect_nodes=2 workers=4
    cat >"$work/$what.sbatch" <<JOB
#!/bin/bash
#SBATCH -N $mn_nodes --ntasks-per-node=$per_node --time=5 -o $out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
# Open MPI talks over the virtual nodes' subnet only.
export OMPI_MCA_btl_tcp_if_include=10.213.77.0/24 OMPI_MCA_oob_tcp_if_include=10.213.77.0/24
mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -n 1 $program $workers $expect_nodes $what
JOB
    job="$(sbatch --parsable "$work/$what.sbatch")" || { echo "FAIL: sbatch"; exit 1; }
    wait_job "$job" 240
    grep -v '^\[vnode' "$out" 2>/dev/null
    echo "job $job ended as ${state:-unknown}"
    if grep -q '^PASS$' "$out" 2>/dev/null; then echo "PASS: $what over $expect_nodes of $mn_nodes nodes"; exit 0; fi
    echo "FAIL: $what (see $out)"
    exit 1
    ;;
  silence)
    out="$work/silence.out"
    rm -f "$out" "$work"/cut-* "$work"/restore-*
    cat >"$work/silence.sbatch" <<JOB
#!/bin/bash
#SBATCH -N 3 --ntasks-per-node=3 --time=5 -o $out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
export OMPI_MCA_btl_tcp_if_include=10.213.77.0/24 OMPI_MCA_oob_tcp_if_include=10.213.77.0/24
mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -n 1 $program $work
JOB
    job="$(sbatch --parsable "$work/silence.sbatch")" || { echo "FAIL: sbatch"; exit 1; }
    # The program asks, through files, for vnode3's link to go down and later to come back.
    for _ in $(seq 1 480); do
      if [ -e "$work/cut-now" ] && [ ! -e "$work/cut-done" ]; then
        ip link set fibravc3 down && touch "$work/cut-done"
      fi
      if [ -e "$work/restore-now" ] && [ ! -e "$work/restore-done" ]; then
        ip link set fibravc3 up && touch "$work/restore-done"
      fi
      state="$(job_state "$job")"
      case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
      # Its verdict is in: with Open MPI 4.1, MPI_Finalize after a node was cut off may hang (see
      # docs/slurm.md), so the job is not waited for once the program has said PASS or FAIL.
      grep -qE '^(PASS|FAIL)$' "$out" 2>/dev/null && { sleep 1; scancel "$job" 2>/dev/null; break; }
      sleep 0.25
    done
    ip link set fibravc3 up 2>/dev/null || true
    grep -v '^\[vnode' "$out" 2>/dev/null
    echo "job $job ended as ${state:-unknown}"
    if grep -q '^PASS$' "$out" 2>/dev/null; then echo "PASS: silence on other nodes"; exit 0; fi
    echo "FAIL: silence (see $out)"
    exit 1
    ;;
  locks)
    # 8 Processes on the workers of a pool spread over 2 nodes count under one Lock and meet at a
    # Barrier (tests/multinode/locks.cpp checks every count).
    out="$work/locks.out"
    rm -f "$out"
    cat >"$work/locks.sbatch" <<JOB
#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=3 --time=5 -o $out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
export OMPI_MCA_btl_tcp_if_include=10.213.77.0/24 OMPI_MCA_oob_tcp_if_include=10.213.77.0/24
mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -n 1 $program
JOB
    job="$(sbatch --parsable "$work/locks.sbatch")" || { echo "FAIL: sbatch"; exit 1; }
    wait_job "$job" 480
    [ -n "$state" ] && ! [[ "$state" =~ ^(PENDING|RUNNING|CONFIGURING|COMPLETING)$ ]] || scancel "$job" 2>/dev/null
    grep -v '^\[vnode' "$out" 2>/dev/null
    echo "job $job ended as ${state:-unknown}"
    if grep -q '^PASS$' "$out" 2>/dev/null; then echo "PASS: locks and a barrier over 2 nodes"; exit 0; fi
    echo "FAIL: locks (see $out)"
    exit 1
    ;;
  queue_readers)
    # Two reader Processes on two nodes; the program asks (through a file holding the node's number)
    # for the node of one of them to be cut off mid-stream (its link down, as in `silence`). A node
    # killed outright ends the whole job with Open MPI 4.1 (mpirun aborts when one of its daemons
    # dies; see docs/architecture.md, "Placement"), so the loss fibra must survive is this one.
    out="$work/queue_readers.out"
    rm -rf "$work/queue_readers" && mkdir -p "$work/queue_readers"
    rm -f "$out"
    cat >"$work/queue_readers.sbatch" <<JOB
#!/bin/bash
#SBATCH -N 3 --ntasks-per-node=2 --time=5 --no-kill -o $out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
export OMPI_MCA_btl_tcp_if_include=10.213.77.0/24 OMPI_MCA_oob_tcp_if_include=10.213.77.0/24
mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -n 1 $program $work/queue_readers
JOB
    job="$(sbatch --parsable "$work/queue_readers.sbatch")" || { echo "FAIL: sbatch"; exit 1; }
    cd "$work/queue_readers"
    cut=""
    for _ in $(seq 1 960); do
      if [ -e cut-now ] && [ ! -e cut-done ]; then
        cut="$(cat cut-now)"
        ip link set "fibravc$cut" down && touch cut-done
      fi
      state="$(job_state "$job")"
      case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
      # Its verdict is in: MPI_Finalize after a node was cut off may hang (see docs/slurm.md).
      grep -qE '^(PASS|FAIL)' "$out" 2>/dev/null && { sleep 1; scancel "$job" 2>/dev/null; break; }
      sleep 0.25
    done
    [ -n "$cut" ] && ip link set "fibravc$cut" up 2>/dev/null
    [ -n "$state" ] && ! [[ "$state" =~ ^(PENDING|RUNNING|CONFIGURING|COMPLETING)$ ]] || scancel "$job" 2>/dev/null
    grep -v '^\[vnode' "$out" 2>/dev/null
    echo "job $job ended as ${state:-unknown}"
    if grep -q '^PASS$' "$out" 2>/dev/null; then echo "PASS: a reader's node cut off mid-stream"; exit 0; fi
    echo "FAIL: queue_readers (see $out)"
    exit 1
    ;;
  relaunch)
    # The batch script is the one `fibra slurm render` writes for a 3-node spec with a checkpoint:
    # --no-kill, and relaunches on the nodes still alive. The program asks (through a file) for
    # vnode3 to die mid-run: every process of it is killed, its slurmd included.
    [ -x "$fibra" ] || { echo "FAIL: run.sh relaunch needs the fibra command"; exit 1; }
    rm -rf "$work/relaunch" && mkdir -p "$work/relaunch"
    cd "$work/relaunch"
    cat >relaunch.toml <<SPEC
[job]
name = "relaunch"
program = "$program"
args = ["$work/relaunch"]
workers = 6
env = { FIBRA_PROGRESS = "0", OMPI_MCA_btl_tcp_if_include = "10.213.77.0/24", OMPI_MCA_oob_tcp_if_include = "10.213.77.0/24" }
[resources]
nodes = 3
tasks = 9
time = "5:00"
[checkpoint]
path = "$work/relaunch/relaunch.h5"
relaunches = 2
SPEC
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # sbatch passes them to the job
    job="$("$fibra" slurm submit relaunch.toml)" || { echo "FAIL: fibra slurm submit"; exit 1; }
    out="$work/relaunch/relaunch-$job.out"
    killed_at=""
    for _ in $(seq 1 960); do
      if [ -e kill-now ] && [ ! -e kill-done ]; then
        "$vc" kill-node 3 && touch kill-done
        killed_at="$(date +%s.%N)"
      fi
      state="$(job_state "$job")"
      case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
      sleep 0.25
    done
    [ -n "$state" ] && ! [[ "$state" =~ ^(PENDING|RUNNING|CONFIGURING|COMPLETING)$ ]] || scancel "$job" 2>/dev/null
    grep -v '^\[vnode' "$out" 2>/dev/null
    exit_code="$(scontrol show job "$job" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')"
    ended_at="$(date -d "$(scontrol show job "$job" 2>/dev/null | sed -n 's/.* EndTime=\([0-9T:-]*\).*/\1/p')" +%s 2>/dev/null)"
    echo "job $job ended as ${state:-unknown}, exit code ${exit_code:-unknown}"
    restarted_at="$(sed -n 's/^run 1: driver started at \([0-9.]*\) .*/\1/p' "$out")"
    if [ -n "$killed_at" ] && [ -n "$restarted_at" ]; then
      awk -v k="$killed_at" -v r="$restarted_at" -v e="$ended_at" \
        'BEGIN { printf "vnode3 killed; the relaunched driver started %.1f s later; the job ended %.0f s after the kill (by its EndTime)\n", r - k, e - k }'
    fi
    fails=()
    [ -e kill-done ] || fails+=("vnode3 was never killed")
    grep -q '^PASS$' "$out" 2>/dev/null || fails+=("no run printed PASS")
    grep -Eq '^fibra: the driver ended with status 75 at [0-9:]+Z after losing its workers on vnode3; node\(s\) vnode3 did not answer \(probed in [0-9]+ s\); relaunch 1 of 2 on vnode1,vnode2 ' "$out" ||
      fails+=("no relaunch on vnode1,vnode2 after the driver reported vnode3 lost and stopped for its checkpoint")
    grep -Eq '^run 1: resuming with [1-9][0-9]* of 3000 results in the checkpoint$' "$out" ||
      fails+=("the relaunched driver did not resume from a checkpoint holding results")
    grep -q '^run 1: agent .* on vnode3$' "$out" && fails+=("the relaunched driver placed an agent on the lost vnode3")
    grep -q '^run 1: agent .* on vnode2$' "$out" || fails+=("the relaunched driver has no agent on vnode2")
    [ "$state" = COMPLETED ] && [ "$exit_code" = 0:0 ] || fails+=("the job did not end COMPLETED with exit code 0")
    if [ ${#fails[@]} -eq 0 ]; then echo "PASS: relaunch after a lost node"; exit 0; fi
    printf 'FAIL: %s\n' "${fails[@]}"
    exit 1
    ;;
  elastic|elastic_killed)
    # A driver job of one node (its spec's [elastic], rendered by `fibra slurm submit`) grows with
    # worker jobs of 4 workers each, which fit only on vnode2 and vnode3. The program asks (through a
    # file holding a job id) for one worker job to be cancelled mid-map. elastic_killed: the driver
    # kills itself once a worker job has joined, and no worker job may outlive it.
    # (killed: room for 3 worker jobs on 2 free nodes, so that one stays pending, which only the
    # batch script's cancel can remove.)
    mode="" max_nodes=3 backlog=2
    [ "$what" = elastic_killed ] && mode=killed max_nodes=4 backlog=3
    [ -x "$fibra" ] || { echo "FAIL: run.sh elastic needs the fibra command"; exit 1; }
    rm -rf "$work/elastic" && mkdir -p "$work/elastic"
    cd "$work/elastic"
    cat >elastic.toml <<SPEC
[job]
name = "elastic"
program = "$program"
args = ["$work/elastic", "$mode"]
workers = 1
env = { FIBRA_PROGRESS = "0", OMPI_MCA_btl_tcp_if_include = "10.213.77.0/24", OMPI_MCA_oob_tcp_if_include = "10.213.77.0/24" }
[resources]
nodes = 1
tasks = 2
memory = "400M"
time = "5:00"
[checkpoint]
path = "$work/elastic/elastic.h5"
[elastic]
max_nodes = $max_nodes
workers_per_node = 4
worker_time = "5:00"
backlog = $backlog
idle_timeout_s = 5
max_submit_per_minute = 60
drain_before_s = 30
SPEC
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # sbatch passes them to the job
    job="$("$fibra" slurm submit elastic.toml)" || { echo "FAIL: fibra slurm submit"; exit 1; }
    out="$work/elastic/elastic-$job.out"
    cancelled=""
    for _ in $(seq 1 960); do
      if [ -s cancel-now ] && [ -z "$cancelled" ]; then
        cancelled="$(cat cancel-now)"
        scancel "$cancelled" && echo "run.sh: cancelled worker job $cancelled"
      fi
      state="$(job_state "$job")"
      case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
      sleep 0.25
    done
    [ -n "$state" ] && ! [[ "$state" =~ ^(PENDING|RUNNING|CONFIGURING|COMPLETING)$ ]] || scancel "$job" 2>/dev/null
    grep -v '^\[vnode' "$out" 2>/dev/null
    echo "job $job ended as ${state:-unknown}"
    status="$("$fibra" slurm status "$job" 2>&1)"
    echo "$status"
    fails=()
    if [ "$mode" = killed ]; then
      grep -q 'the driver kills itself' "$out" 2>/dev/null || fails+=("the driver never saw a worker job join")
      grep -q '^worker job [0-9]*: ' <<<"$status" || fails+=("fibra slurm status shows no worker job")
      for _ in $(seq 1 40); do  # (cancelled jobs show COMPLETING for a moment)
        left="$(squeue -h -t PENDING,CONFIGURING,RUNNING,COMPLETING -n "fibra-worker-$job" -o '%i %T' 2>&1)"
        [ -z "$left" ] && break
        sleep 0.25
      done
      [ -z "$left" ] || fails+=("worker jobs outlived the killed driver's job by 10 s: $left")
      if [ ${#fails[@]} -eq 0 ]; then echo "PASS: no worker job outlived a killed elastic driver"; exit 0; fi
      printf 'FAIL: %s\n' "${fails[@]}"
      exit 1
    fi
    grep -q '^PASS$' "$out" 2>/dev/null || fails+=("the driver did not print PASS")
    [ "$state" = COMPLETED ] || fails+=("the driver's job did not end COMPLETED")
    [ "$(grep -c 'submitted worker job' "$out")" -ge 2 ] || fails+=("the driver's log shows fewer than 2 worker jobs submitted")
    [ -n "$cancelled" ] && ! grep -q "^worker job $cancelled: CANCELLED" <<<"$status" &&
      fails+=("fibra slurm status does not show worker job $cancelled as CANCELLED")
    left="$(squeue -h -t PENDING,CONFIGURING,RUNNING,COMPLETING -n "fibra-worker-$job" -o '%i %T' 2>&1)"
    [ -z "$left" ] || fails+=("worker jobs left in squeue after the driver's job ended: $left")
    if [ ${#fails[@]} -eq 0 ]; then echo "PASS: an elastic run grew onto 2 nodes and shrank back"; exit 0; fi
    printf 'FAIL: %s\n' "${fails[@]}"
    exit 1
    ;;
  es)
    # ES on the MuJoCo hopper over the 3 nodes (6 workers, an agent of 2 on each) and the same run
    # on this one host (2 workers): the same seed gives the same curve and the same policy, bit for
    # bit, wherever the pairs ran (h5py compares the two state files).
    out="$work/es.out"
    rm -f "$out" "$work"/es_nodes.* "$work"/es_one.*
    es_args="--env hopper --population 24 --generations 4 --target 1e9 --eval-episodes 2 --seed 3"
    cat >"$work/es.sbatch" <<JOB
#!/bin/bash
#SBATCH -N 3 --ntasks-per-node=2 --time=5 -o $out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
export OMPI_MCA_btl_tcp_if_include=10.213.77.0/24 OMPI_MCA_oob_tcp_if_include=10.213.77.0/24
mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -n 1 $program $es_args --workers 6 \
  --state $work/es_nodes.h5 --csv $work/es_nodes.csv
JOB
    job="$(sbatch --parsable "$work/es.sbatch")" || { echo "FAIL: sbatch"; exit 1; }
    wait_job "$job" 240  # (at most 2 minutes, and 90 s for the run below: within ctest's 300)
    grep -v '^\[vnode' "$out" 2>/dev/null
    echo "job $job ended as ${state:-unknown}"
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) ;; *) scancel "$job" 2>/dev/null ;; esac
    grep -q "^es: workers on 3 hosts" "$out" || { echo "FAIL: es: its workers were not on the 3 nodes"; exit 1; }
    grep -q "generation   4:" "$out" || { echo "FAIL: es: the run on the nodes did not finish"; exit 1; }
    # On this host alone: nothing of the cluster's or of an allocation ctest may run in.
    (export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
     for v in $(compgen -e | grep '^SLURM_'); do unset "$v"; done
     timeout -k 10 90 $program $es_args --workers 2 --state "$work/es_one.h5" --csv "$work/es_one.csv") \
      > "$work/es_one.out" 2>&1
    grep -q "^es: workers on 1 host" "$work/es_one.out" && grep -q "generation   4:" "$work/es_one.out" ||
      { echo "FAIL: es: the run on one host did not finish there"; cat "$work/es_one.out"; exit 1; }
    /usr/bin/python3 - "$work/es_nodes.h5" "$work/es_one.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
for name in ("theta", "adam_m", "adam_v", "obs_sum", "obs_sumsq"):
    if a[name][()].tobytes() != b[name][()].tobytes():
        print(f"FAIL: es: {name} differs between 3 nodes and one host")
        sys.exit(1)
kept = [0, 1, 2, 4]  # generation, mean, best, steps (not the wall time)
if not np.array_equal(a["curve"][()][:, kept], b["curve"][()][:, kept]):
    print("FAIL: es: the curves differ:", a["curve"][()][:, kept].tolist(), b["curve"][()][:, kept].tolist())
    sys.exit(1)
print("PASS: es on 3 nodes gave the curve and policy of one host")
PY
    ;;
  *) echo "run.sh: unknown test '$what'" >&2; exit 2 ;;
esac
