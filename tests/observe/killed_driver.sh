#!/usr/bin/env bash
# observe.killed_driver: a driver SIGKILLed in the middle of a map leaves an event log that
# `fibra trace` and `fibra report` read, whose trace is valid and holds an event for every attempt
# the log shows (at least the 100 done when it was killed), and which has no `end` event.
#
#   killed_driver.sh LONG_MAP FIBRA VALIDATOR
set -u
prog=$1 fibra=$2 validator=$3
dir=$(mktemp -d /tmp/fibra-killed-driver-XXXXXX)
log=$dir/events.jsonl
FIBRA_EVENTS=$dir "$prog" &
pid=$!
done_count() { grep -c '"ev":"done"' "$log" 2>/dev/null || true; }
deadline=$((SECONDS + 90))
while :; do
  n=$(done_count)
  [ "${n:-0}" -ge 100 ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: the driver ended before 100 chunks were done (the log has ${n:-0} done events)"
    exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "FAIL: fewer than 100 done events in $log within 90 s (${n:-0})"
    kill -KILL "$pid"
    exit 1
  fi
  sleep 0.1
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
# Its agents, which its pool started (their pids are in the log), end now rather than by their
# orphan guard; a pid is only signalled while it still runs this program.
name=$(basename "$prog" | cut -c1-15)
for agent in $(/usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("ev") == "worker":
        print(e["pid"])' "$log"); do
  [ "$(ps -o comm= -p "$agent" 2>/dev/null)" = "$name" ] && kill -KILL "$agent"
done
status=0
if grep -q '"ev":"end"' "$log"; then
  echo "FAIL: the killed driver's log has an end event"
  status=1
fi
"$fibra" trace "$dir" -o "$dir/trace.json" || { echo "FAIL: fibra trace could not read the killed driver's log"; status=1; }
/usr/bin/python3 "$validator" "$dir/trace.json" --log "$log" --min-attempts 100 || status=1
"$fibra" report "$dir" -o "$dir/report.html" || { echo "FAIL: fibra report could not read the killed driver's log"; status=1; }
grep -q 'id="failures"' "$dir/report.html" 2>/dev/null || { echo "FAIL: fibra report wrote no page"; status=1; }
[ $status -eq 0 ] && echo "PASS: $(done_count) chunks done before the kill; the trace of its log is valid"
rm -rf "$dir"
exit $status
