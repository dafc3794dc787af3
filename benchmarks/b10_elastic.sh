#!/usr/bin/env bash
# B10 (b): the seeds' claim measured, "a job that needs many resources waits until all of them are
# allocated". On a virtual Slurm cluster of 4 nodes (slurm/virtual-cluster.sh), three jobs of
# ours hold 3 of the nodes and let one go every RELEASE seconds. A fixed workload (4 nodes' worth of
# SECONDS: 4 workers a node, items of 100 ms) runs, in turn:
#   all      as one job asking for all 4 nodes (it waits for the last one), and
#   elastic  as a job of 1 node whose spec has [elastic] max_nodes = 4 (it grows as nodes free up).
# Prints, per round, the time from the job's submission to its driver's start and to its last
# result; then the medians and their ratio. Needs root (network namespaces) and the build.
#
#   benchmarks/b10_elastic.sh [--rounds N] [--seconds S] [--release S] [--dir D]
# Exit 77 when this machine cannot host the cluster.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${FIBRA_BUILD:-$root/build}"
vc="$root/slurm/virtual-cluster.sh"
rounds=1 seconds=60 release=20 dir=/tmp/fibra-b10-elastic
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --release) release="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--seconds S] [--release S] [--dir D]" >&2; exit 2 ;;
  esac
done
program="$build/benchmarks/b10_workload" fibra="$build/fibra"
for f in "$program" "$fibra"; do [ -x "$f" ] || { echo "b10_elastic: $f is missing: build first" >&2; exit 2; }; done
per_node=4 ms=100
items=$((4 * per_node * seconds * 1000 / ms))
export FIBRA_VC_DIR="$dir/cluster" FIBRA_VC_PORT=6937 FIBRA_VC_NODES=4 FIBRA_VC_CPUS=5
reason="$("$vc" check)" || { echo "b10_elastic: skipped: $reason"; exit 77; }
mkdir -p "$dir"
trap '"$vc" stop >/dev/null 2>&1 || true' EXIT
started="$("$vc" start)" || { echo "b10_elastic: the virtual cluster did not start" >&2; exit 1; }
eval "$started"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # sbatch passes them to the jobs

job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
final() { [[ "$1" =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$ ]]; }
# Waits (at most $2 s) for job $1 to end; prints its last state.
wait_job() {
  local s="" i
  for ((i = 0; i < $2 * 4; i++)); do
    s="$(job_state "$1")"
    final "$s" && break
    sleep 0.25
  done
  echo "$s"
}

# One run of the workload, "all" or "elastic"; prints "<to driver start> <to last result>".
run_one() {
  local way="$1" work="$dir/$1" holders=() k job t0 state out i
  rm -rf "$work" && mkdir -p "$work"
  for k in 1 2 3; do
    holders+=("$(sbatch --parsable -w "vnode$((k + 1))" --exclusive -t 5 -J b10-holder -o /dev/null \
      --wrap "sleep $((k * release))")")
  done
  for ((i = 0; i < 120; i++)); do
    local running=0
    for k in "${holders[@]}"; do [ "$(job_state "$k")" = RUNNING ] && running=$((running + 1)); done
    [ "$running" = 3 ] && break
    sleep 0.25
  done
  [ "$running" = 3 ] || { echo "b10_elastic: the 3 holder jobs did not all start within 30 s" >&2; return 1; }
  local nodes=4 tasks=$((4 * per_node + 1)) workers=$((4 * per_node)) elastic=""
  if [ "$way" = elastic ]; then
    nodes=1 tasks=$((per_node + 1)) workers=$per_node
    elastic="[elastic]
max_nodes = 4
workers_per_node = $per_node
worker_time = \"10:00\"
backlog = 3
max_submit_per_minute = 60
idle_timeout_s = 30
drain_before_s = 30"
  fi
  cat >"$work/b10.toml" <<SPEC
[job]
name = "b10-$way"
program = "$program"
args = ["$workers", "$items", "$ms"]
workers = $workers
workdir = "$work"
env = { FIBRA_PROGRESS = "0", OMPI_MCA_btl_tcp_if_include = "10.213.77.0/24", OMPI_MCA_oob_tcp_if_include = "10.213.77.0/24" }
[resources]
nodes = $nodes
tasks = $tasks
memory = "400M"
time = "10:00"
$elastic
SPEC
  t0="$(date +%s.%N)"
  job="$(cd "$work" && "$fibra" slurm submit b10.toml)" || { echo "b10_elastic: fibra slurm submit failed" >&2; return 1; }
  state="$(wait_job "$job" $((seconds * 4 + release * 3 + 120)))"
  scancel "${holders[@]}" 2>/dev/null
  out="$work/b10-$way-$job.out"
  local start end
  start="$(sed -n 's/^b10: driver started at \([0-9.]*\)$/\1/p' "$out" | head -1)"
  end="$(sed -n 's/^b10: last result at \([0-9.]*\);.*/\1/p' "$out" | head -1)"
  if [ "$state" != COMPLETED ] || [ -z "$start" ] || [ -z "$end" ] || ! grep -q ' 0 wrong;' "$out"; then
    echo "b10_elastic: the $way job $job ended as ${state:-unknown} without every result (see $out)" >&2
    return 1
  fi
  grep -E '^(fibra: (submitted|agent .* joined)|b10: last)' "$out" | sed "s/^/  $way: /" >&2
  # the holders and any worker job gone before the next run
  for k in "${holders[@]}"; do wait_job "$k" 30 >/dev/null; done
  for ((i = 0; i < 120; i++)); do
    [ -z "$(squeue -h -t PENDING,CONFIGURING,RUNNING,COMPLETING -n "fibra-worker-$job" 2>/dev/null)" ] && break
    sleep 0.25
  done
  awk -v t="$t0" -v s="$start" -v e="$end" 'BEGIN { printf "%.1f %.1f\n", s - t, e - t }'
}

echo "B10 (b): $items items of $ms ms (4 nodes x $per_node workers x $seconds s); 3 of 4 nodes held, one freed every $release s"
all=() el=()
for ((r = 1; r <= rounds; r++)); do
  a="$(run_one all)" || exit 1
  e="$(run_one elastic)" || exit 1
  echo "round $r: all 4 nodes: driver started ${a% *} s, last result ${a#* } s after submission; elastic from 1 node: driver started ${e% *} s, last result ${e#* } s"
  all+=("${a#* }") el+=("${e#* }")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ma="$(median "${all[@]}")" me="$(median "${el[@]}")"
awk -v a="$ma" -v e="$me" -v n="$rounds" \
  'BEGIN { printf "B10 (b), median of %d: one job for all 4 nodes %.1f s, elastic from 1 node %.1f s (%.2fx sooner)\n", n, a, e, a / e }'
