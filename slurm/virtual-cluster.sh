#!/usr/bin/env bash
# Starts, stops or reports a Slurm cluster of 2 to 4 virtual nodes on this one machine, for fibra's
# many-node tests (label multinode) and for trying many-node runs by hand.
#
# Each node is a network namespace with its own address on a private test subnet (a bridge that
# exists only inside this machine) and its own hostname (a UTS namespace), running one slurmd;
# slurmctld runs in the root namespace. Jobs inherit their node's namespaces, so `hostname` and the
# address differ per node, as Open MPI needs. Facts: ../shared/notes/virtual-multinode-facts.md.
#
# Usage: slurm/virtual-cluster.sh start|stop|status|check [--nodes N] [--dir DIR] [--port P] [--cpus C]
#        slurm/virtual-cluster.sh kill-node K      SIGKILL every process of node vnodeK (its slurmd
#                                                  included), as if the node had died
#   --nodes N   2..4 nodes, named vnode1..vnodeN (default: $FIBRA_VC_NODES or 3)
#   --dir DIR   scratch folder (default: $FIBRA_VC_DIR or /tmp/fibra-vcluster)
#   --port P    slurmctld's port; slurmd uses P+1 (default: $FIBRA_VC_PORT or 6917)
#   --cpus C    CPUs each node advertises (default: $FIBRA_VC_CPUS or 4)
# `check` says whether this machine allows what the cluster needs (root, network namespaces):
# exit 0 if so, else 77 with the reason (tests count that as skipped, never as passed).
# `start` prints `export SLURM_CONF=...`. `stop` kills the daemons by pid, deletes the namespaces,
# links and the bridge, and leaves nothing behind; both are safe to re-run.
set -euo pipefail

cmd="${1:-}"
[ $# -gt 0 ] && shift
victim=""
if [ "$cmd" = kill-node ]; then victim="${1:-}"; [ $# -gt 0 ] && shift; fi
nodes="${FIBRA_VC_NODES:-3}"
dir="${FIBRA_VC_DIR:-/tmp/fibra-vcluster}"
port="${FIBRA_VC_PORT:-6917}"
cpus="${FIBRA_VC_CPUS:-4}"
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --cpus) cpus="$2"; shift 2 ;;
    *) echo "virtual-cluster: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] && [ "$dir" != / ] || { echo "virtual-cluster: --dir must name a scratch folder" >&2; exit 2; }
[[ "$nodes" =~ ^[2-4]$ ]] || { echo "virtual-cluster: --nodes must be 2, 3 or 4 (got '$nodes')" >&2; exit 2; }
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"
# The test subnet: it exists only inside this machine (a bridge with no uplink).
bridge=fibravc0
subnet_prefix=10.213.77
ctl_addr="$subnet_prefix.1"

die() { echo "virtual-cluster: $*" >&2; exit 1; }
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster-common.sh"
node_name() { echo "vnode$1"; }
node_addr() { echo "$subnet_prefix.$((10 + $1))"; }
ns_name() { echo "fibravc-n$1"; }

# The pid in a pid file, if that process is alive and is a Slurm daemon (a pid file left by a
# crashed run may name a pid reused by another program since: that one is not ours to end).
live_pid() {
  local f="$1" pid comm
  [ -s "$f" ] || return 1
  pid="$(cat "$f")"
  kill -0 "$pid" 2>/dev/null || return 1
  [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  comm="$(cat "/proc/$pid/comm" 2>/dev/null)"
  case "$comm" in slurmctld|slurmd) ;; *) return 1 ;; esac
  echo "$pid"
}

check() {
  [ "$(id -u)" -eq 0 ] || { echo "virtual-cluster: needs root (network namespaces, a bridge, slurmd as root)"; return 77; }
  command -v ip >/dev/null && command -v nsenter >/dev/null && command -v unshare >/dev/null ||
    { echo "virtual-cluster: needs ip (iproute2), nsenter and unshare (util-linux)"; return 77; }
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
    { echo "virtual-cluster: slurmctld/slurmd not found; run scripts/install-deps.sh"; return 77; }
  local probe="fibravc-probe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "virtual-cluster: this machine forbids network namespaces (ip netns add failed)"
    return 77
  fi
  ip netns del "$probe" 2>/dev/null || true
  if [ -d /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then umount /run/netns 2>/dev/null || true; fi
  return 0
}

write_conf() {
  mkdir -p "$dir/state" "$dir/log"
  local i names="" mem
  mem="$(slurm_real_memory_mb "$nodes")"
  {
    echo "# Written by fibra's slurm/virtual-cluster.sh: $nodes virtual nodes on one machine. Not for production."
    echo "ClusterName=fibra-virtual"
    echo "SlurmctldHost=localhost($ctl_addr)"
    slurm_common_conf "$port" "$dir"
    cat <<EOF
JobRequeue=0
SlurmdTimeout=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/d-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/tmp-%n
EOF
    for ((i = 1; i <= nodes; i++)); do
      echo "NodeName=$(node_name $i) NodeHostname=$(node_name $i) NodeAddr=$(node_addr $i) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
      names+="${names:+,}$(node_name $i)"
    done
    echo "PartitionName=virtual Nodes=$names Default=YES MaxTime=1:00:00 State=UP OverSubscribe=NO"
  } >"$conf"
  {
    echo "127.0.0.1 localhost"
    echo "$ctl_addr fibravc-ctl"
    for ((i = 1; i <= nodes; i++)); do echo "$(node_addr $i) $(node_name $i)"; done
  } >"$dir/hosts"
}

net_up() {
  ip link add "$bridge" type bridge 2>/dev/null || true
  ip addr replace "$ctl_addr/24" dev "$bridge"
  ip link set "$bridge" up
  local i ns
  for ((i = 1; i <= nodes; i++)); do
    ns="$(ns_name $i)"
    ip netns add "$ns" 2>/dev/null || true
    ip link add "fibravc$i" type veth peer name "fibravc${i}p" 2>/dev/null || true
    ip link set "fibravc${i}p" netns "$ns" 2>/dev/null || true
    ip link set "fibravc$i" master "$bridge"
    ip link set "fibravc$i" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr replace "$(node_addr $i)/24" dev "fibravc${i}p"
    ip -n "$ns" link set "fibravc${i}p" up
  done
}

net_down() {
  local i
  for ((i = 1; i <= 4; i++)); do
    ip link del "fibravc$i" 2>/dev/null || true
    ip netns del "$(ns_name $i)" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

node_states() { sinfo -h -N -o '%N %T' 2>/dev/null; }

wait_idle() {
  local deadline=$((SECONDS + ${FIBRA_VC_START_TIMEOUT:-40})) idle
  while [ $SECONDS -lt $deadline ]; do
    idle="$(node_states | awk '$2 == "idle" || $2 == "mixed" || $2 == "allocated"' | wc -l)"
    [ "$idle" -ge "$nodes" ] && return 0
    sleep 0.2
  done
  echo "virtual-cluster: not all $nodes nodes are idle after ${FIBRA_VC_START_TIMEOUT:-40} s:" >&2
  node_states >&2 || true
  tail -n 5 "$dir"/log/*.log >&2 2>/dev/null || true
  return 1
}

start() {
  local reason
  reason="$(check)" || die "${reason#virtual-cluster: }"
  if live_pid "$dir/slurmctld.pid" >/dev/null && [ -f "$conf" ] && grep -q "^NodeName=$(node_name "$nodes") " "$conf"; then
    wait_idle || exit 1
    echo "export SLURM_CONF=$conf"
    return 0
  fi
  # The bridge, namespaces and subnet are one set per machine: owned by one cluster folder.
  if ip link show "$bridge" >/dev/null 2>&1 && [ ! -e "$dir/network.owner" ]; then
    die "another virtual cluster owns this machine's test network (bridge $bridge); stop it first (slurm/virtual-cluster.sh stop --dir <its folder>)"
  fi
  stop >/dev/null 2>&1 || true
  rm -rf "$dir/state"  # a fresh cluster: no job of an earlier one comes back
  mkdir -p "$dir"
  write_conf
  touch "$dir/network.owner"
  net_up
  # -c: start without saved jobs; -i: carry on past unreadable state
  slurmctld -c -i -f "$conf" || die "slurmctld did not start; see $dir/log/slurmctld.log"
  local i name
  for ((i = 1; i <= nodes; i++)); do
    name="$(node_name $i)"
    mkdir -p "$dir/d-$name" "$dir/tmp-$name"
    # Its own network (the node's address) and hostname; a private /etc/hosts naming every node.
    # (`ip netns exec` remounts /sys, and slurmd 22.05 then cannot find its cgroups: nsenter.)
    nsenter --net="/run/netns/$(ns_name $i)" unshare --uts --mount --propagation private \
      sh -c "hostname $name && mount --bind '$dir/hosts' /etc/hosts && exec slurmd -N $name -f '$conf'" ||
      die "slurmd of $name did not start; see $dir/log/slurmd-$name.log"
  done
  if ! wait_idle; then stop >/dev/null 2>&1 || true; exit 1; fi
  echo "export SLURM_CONF=$conf"
}

# Pids of the processes that live in the virtual nodes' network namespaces (slurmd, the jobs'
# slurmstepd, mpirun, orted, workers): what this cluster started.
node_pids() {
  local i ns ino p
  for i in ${1:-1 2 3 4}; do
    ns="/run/netns/$(ns_name $i)"
    [ -e "$ns" ] || continue
    ino="$(stat -L -c %i "$ns" 2>/dev/null)" || continue
    for p in /proc/[0-9]*; do
      if [ "$(stat -L -c %i "$p/ns/net" 2>/dev/null)" = "$ino" ]; then echo "${p#/proc/}"; fi
    done
  done
  return 0
}

stop() {
  local f pid i
  if [ -f "$conf" ] && live_pid "$dir/slurmctld.pid" >/dev/null; then
    scancel --full --quiet "--user=$(id -un)" >/dev/null 2>&1 || true
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  # The network (and what lives in it) is this folder's only if it started it.
  local owner=0 left=""
  [ -e "$dir/network.owner" ] && owner=1
  # Jobs' processes go with their nodes (a node's slurmd does not take its jobs down when it stops).
  [ "$owner" = 1 ] && left="$(node_pids | tr '\n' ' ')"
  if [ -n "${left// }" ]; then
    kill -TERM $left 2>/dev/null || true
    sleep 0.5
    left="$(node_pids | tr '\n' ' ')"
    [ -n "${left// }" ] && kill -KILL $left 2>/dev/null || true
  fi
  for f in "$dir"/slurmd-*.pid "$dir/slurmctld.pid"; do
    [ -e "$f" ] || continue
    for ((i = 0; i < 50; i++)); do live_pid "$f" >/dev/null || break; sleep 0.1; done
    if pid="$(live_pid "$f")"; then
      kill "$pid" 2>/dev/null || true
      sleep 0.5
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  if [ "$owner" = 1 ]; then
    net_down
    rm -f "$dir/network.owner"
    # `ip netns add` leaves /run/netns bind-mounted; with no namespace left, it goes too.
    if [ -d /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
      umount /run/netns 2>/dev/null || true
    fi
  fi
  echo "virtual-cluster: stopped"
}

# A node dies: every process in its network namespace (slurmd, slurmstepd, orted, agents, workers)
# is SIGKILLed at once. Its namespace and link stay, so connections to it are refused, as from a
# machine that is up but whose processes are gone; slurmctld marks it DOWN after SlurmdTimeout.
kill_node() {
  [[ "$victim" =~ ^[1-4]$ ]] || { echo "virtual-cluster: kill-node takes a node number, 1 to 4 (got '$victim')" >&2; exit 2; }
  [ -e "$dir/network.owner" ] || die "no virtual cluster of $dir runs"
  local pids
  pids="$(node_pids "$victim" | tr '\n' ' ')"
  [ -n "${pids// }" ] || die "node $(node_name "$victim") has no process to kill"
  kill -KILL $pids 2>/dev/null || true
  echo "virtual-cluster: killed $(wc -w <<<"$pids") process(es) of $(node_name "$victim"): $pids"
}

status() {
  echo "conf: $conf"
  live_pid "$dir/slurmctld.pid" >/dev/null || { echo "slurmctld: not running"; exit 3; }
  sinfo -N -o '%N %T %c %m' || exit 3
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  check) r=0; check || r=$?; exit $r ;;
  kill-node) kill_node ;;
  *) echo "usage: $0 start|stop|status|check|kill-node K [--nodes N] [--dir DIR] [--port P] [--cpus C]" >&2; exit 2 ;;
esac
