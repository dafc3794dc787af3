#!/usr/bin/env bash
# The driver ends three ways (SIGKILL, uncaught exception, return); each time its agents and
# executors must be gone within a few seconds. Only kills the driver it started, by pid.
set -u
prog=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

alive() { for p in "$@"; do kill -0 "$p" 2>/dev/null && echo "$p"; done; }

for how in sigkill throw return; do
  file=$dir/pids-$how
  "$prog" orphan "$file" "$how" >"$dir/out-$how" 2>&1 &
  driver=$!
  for _ in $(seq 1 300); do [ -s "$file" ] && break; sleep 0.1; done
  if [ ! -s "$file" ]; then echo "FAIL $how: the driver never wrote its workers' pids"; kill -9 $driver 2>/dev/null; fail=1; continue; fi
  mapfile -t workers < <(sort -u "$file")
  [ "$how" = sigkill ] && kill -9 "$driver"
  wait "$driver" 2>/dev/null
  start=$(date +%s.%N)
  left=""
  for _ in $(seq 1 150); do   # up to 15 s
    left=$(alive "${workers[@]}")
    [ -z "$left" ] && break
    sleep 0.1
  done
  took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ -n "$left" ]; then
    echo "FAIL $how: workers still alive 15 s after the driver ended: $left"
    for p in $left; do kill -9 "$p" 2>/dev/null; done   # ours: started by our driver
    fail=1
  else
    echo "PASS $how: ${#workers[@]} agent/executor processes gone ${took}s after the driver ended"
  fi
done
exit $fail
