#!/usr/bin/env bash
# Starts, stops or reports a single-node Slurm cluster (slurmctld + slurmd from Debian's packages)
# on this machine, without systemd, for fibra's Slurm tests and for trying job specs by hand.
#
# Usage: slurm/local-cluster.sh start|stop|status [--dir DIR] [--cpus N] [--port P]
#   --dir DIR   scratch folder for slurm.conf, state, spool, pid and log files
#               (default: $FIBRA_SLURM_DIR or /tmp/fibra-slurm)
#   --cpus N    CPUs the node advertises (default: $FIBRA_SLURM_CPUS or 8). More than the real cores
#               is allowed (SlurmdParameters=config_overrides): a driver and its spawned workers
#               mostly wait, and the tests need slots for 1 driver + N workers.
#   --port P    slurmctld listens on P and slurmd on P+1 (default: $FIBRA_SLURM_PORT or 6817, Slurm's
#               own); the tests use another pair so they never meet a cluster started by hand.
# `start` prints `export SLURM_CONF=DIR/slurm.conf`; every Slurm command needs it.
# All three commands are safe to re-run: `start` on a running cluster only reports it, `stop` on a
# stopped one does nothing. Needs root (the daemons run as root, auth/none, no munge).
set -euo pipefail

cmd="${1:-}"
[ $# -gt 0 ] && shift
dir="${FIBRA_SLURM_DIR:-/tmp/fibra-slurm}"
cpus="${FIBRA_SLURM_CPUS:-8}"
port="${FIBRA_SLURM_PORT:-6817}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --cpus) cpus="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    *) echo "local-cluster: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

die() { echo "local-cluster: $*" >&2; exit 1; }
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster-common.sh"

# The pid in a pid file, if that process is alive.
live_pid() {
  local f="$dir/$1.pid" pid
  [ -s "$f" ] || return 1
  pid="$(cat "$f")"
  kill -0 "$pid" 2>/dev/null || return 1
  # a daemon that exited but was not reaped (a container's pid 1 may not reap) counts as gone
  [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}

write_conf() {
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  {
    echo "# Written by fibra's slurm/local-cluster.sh: a one-node test cluster. Not for production."
    echo "ClusterName=fibra-local"
    echo "SlurmctldHost=localhost"
    slurm_common_conf "$port" "$dir"
    cat <<EOF
EnforcePartLimits=ALL
# Slurm's default (1) makes every batch job requeueable: a job rendered without --requeue would
# requeue all the same, and the tests could not see the line missing. 0: only jobs submitted with
# --requeue may be requeued, as on clusters that turn the default off.
JobRequeue=0
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$(slurm_real_memory_mb) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=1:00:00 State=UP OverSubscribe=NO
EOF
  } >"$conf"
}

node_state() {
  sinfo -h -n localhost -o '%T' 2>/dev/null | head -n1
}

wait_idle() {
  local deadline=$((SECONDS + ${FIBRA_SLURM_START_TIMEOUT:-30})) state=""
  while [ $SECONDS -lt $deadline ]; do
    state="$(node_state)"
    case "$state" in idle|mixed|allocated) return 0 ;; esac
    sleep 0.2
  done
  echo "local-cluster: node 'localhost' is not idle after ${FIBRA_SLURM_START_TIMEOUT:-30} s (state: '${state:-no answer}')" >&2
  echo "local-cluster: last lines of $dir/log/slurmctld.log and slurmd.log:" >&2
  tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 2>/dev/null || true
  return 1
}

start() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
    die "slurmctld/slurmd not found; run scripts/install-deps.sh"
  [ "$(id -u)" -eq 0 ] || die "must run as root (the test cluster runs its daemons as root)"
  if live_pid slurmctld >/dev/null && live_pid slurmd >/dev/null; then
    wait_idle || exit 1
    echo "export SLURM_CONF=$conf"
    return 0
  fi
  stop >/dev/null 2>&1 || true   # a half-started cluster: clear it first
  write_conf
  # -i: ignore saved state from an earlier run (old jobs, old node records).
  slurmctld -i -f "$conf" || die "slurmctld did not start; see $dir/log/slurmctld.log"
  slurmd -N localhost -f "$conf" || die "slurmd did not start; see $dir/log/slurmd.log"
  if ! wait_idle; then stop >/dev/null 2>&1 || true; exit 1; fi
  scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
  echo "export SLURM_CONF=$conf"
}

# Waits up to $2 tenths of a second for the process in pid file $1 to end.
wait_gone() {
  local i
  for ((i = 0; i < $2; i++)); do
    live_pid "$1" >/dev/null || return 0
    sleep 0.1
  done
  return 1
}

stop() {
  [ -f "$conf" ] || { echo "local-cluster: nothing to stop in $dir"; return 0; }
  if live_pid slurmctld >/dev/null; then
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  local d pid
  for d in slurmctld slurmd; do
    wait_gone "$d" 50 && continue
    pid="$(live_pid "$d")" || continue
    echo "local-cluster: $d (pid $pid) did not stop; sending SIGTERM" >&2
    kill "$pid" 2>/dev/null || true
    wait_gone "$d" 30 || { kill -9 "$pid" 2>/dev/null || true; }
  done
  rm -f "$dir/slurmctld.pid" "$dir/slurmd.pid"
  echo "local-cluster: stopped"
}

status() {
  local c d
  c="$(live_pid slurmctld || echo -)"
  d="$(live_pid slurmd || echo -)"
  echo "slurmctld pid: $c, slurmd pid: $d, conf: $conf"
  [ "$c" != - ] && [ "$d" != - ] || exit 3
  sinfo -N -o '%N %T %c %m' || exit 3
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status [--dir DIR] [--cpus N] [--port P]" >&2; exit 2 ;;
esac
