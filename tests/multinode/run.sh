#!/usr/bin/env bash
# Many-node tests on a virtual Slurm cluster of 3 nodes (slurm/virtual-cluster.sh) on this machine.
#   run.sh spread|silence <program> <work dir>
# spread takes FIBRA_MN_NODES (3) and FIBRA_MN_WORKERS (6) from the environment: with 4 and 64 it
# is the many-node scale figure of docs/benchmarks.md.
# Starts the cluster (its own folder and ports), runs the program in a 3-node job with
# `mpirun -n 1` (as fibra's Slurm scripts do), checks its verdict, and stops the cluster, leaving
# nothing behind. Exit 77 when this machine cannot host the cluster (counted as skipped).
set -uo pipefail
what="$1" program="$2" work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
vc="$here/../../slurm/virtual-cluster.sh"
mn_nodes="${FIBRA_MN_NODES:-3}" mn_workers="${FIBRA_MN_WORKERS:-6}"
export FIBRA_VC_DIR="$work/cluster" FIBRA_VC_PORT=6927 FIBRA_VC_NODES="$mn_nodes" FIBRA_VC_CPUS=4
reason="$("$vc" check)" || { echo "SKIP: $reason"; exit 77; }
mkdir -p "$work"
cleanup() { "$vc" stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
started="$("$vc" start)" || { echo "FAIL: the virtual cluster did not start"; exit 1; }
eval "$started"
[ "${SLURM_CONF:-}" = "$FIBRA_VC_DIR/slurm.conf" ] || { echo "FAIL: the virtual cluster gave no SLURM_CONF"; exit 1; }

case "$what" in
  spread)
    out="$work/spread.out"
    rm -f "$out"
    cat >"$work/spread.sbatch" <<JOB
#!/bin/bash
#SBATCH -N $mn_nodes --ntasks-per-node=2 --time=5 -o $out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
# Open MPI talks over the virtual nodes' subnet only.
export OMPI_MCA_btl_tcp_if_include=10.213.77.0/24 OMPI_MCA_oob_tcp_if_include=10.213.77.0/24
mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -n 1 $program $mn_workers $mn_nodes
JOB
    job="$(sbatch --parsable "$work/spread.sbatch")" || { echo "FAIL: sbatch"; exit 1; }
    # --wait would hold the test without a bound: poll, with one
    for _ in $(seq 1 240); do
      state="$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')"
      case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
      sleep 0.5
    done
    grep -v '^\[vnode' "$out" 2>/dev/null
    echo "job $job ended as ${state:-unknown}"
    if grep -q '^PASS$' "$out" 2>/dev/null; then echo "PASS: spread over $mn_nodes nodes"; exit 0; fi
    echo "FAIL: spread (see $out)"
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
      state="$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')"
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
  *) echo "run.sh: unknown test '$what'" >&2; exit 2 ;;
esac
