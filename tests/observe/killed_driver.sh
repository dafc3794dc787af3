#!/usr/bin/env bash
# observe.killed_driver: while a map runs, `fibra status` says it runs and counts more items done
# half a second later; SIGKILLed in its middle, its driver leaves an event log that `fibra top`
# (which then ends by itself; on a log no run writes, after its --wait), `fibra trace` and `fibra report` read, whose trace is valid and holds
# an event for every attempt the log shows (at least the 100 done when it was killed), and which
# has no `end` event.
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
status=0
# While it runs: `fibra status` says so, and its count of items done grows.
items_done() { "$fibra" status "$dir" | sed -n 's/^items *\([0-9]*\) of.*/\1/p'; }
first=$(items_done)
sleep 0.5
second=$(items_done)
"$fibra" status "$dir" | grep -q '^run .*, running:' || { echo "FAIL: fibra status does not say the run is running"; "$fibra" status "$dir"; status=1; }
if [ -z "$first" ] || [ -z "$second" ] || [ "$second" -le "$first" ]; then
  echo "FAIL: fibra status's items done did not grow in 0.5 s (${first:-none}, then ${second:-none})"
  status=1
fi
kill -KILL "$pid"
wait "$pid" 2>/dev/null
# Once it is gone, `fibra top` draws once more and ends by itself, saying it is gone.
if ! timeout 20 "$fibra" top "$dir" --interval 0.2 > "$dir/top.txt"; then
  echo "FAIL: fibra top did not end by itself within 20 s of the driver's death"
  status=1
fi
grep -q 'gone without ending its log' "$dir/top.txt" || { echo "FAIL: fibra top does not say the driver is gone"; cat "$dir/top.txt"; status=1; }
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
# A log that no run writes (an empty file): `fibra top` gives up after its --wait, naming the file
# and the fix, rather than waiting for ever.
empty=$dir/never/events.jsonl
mkdir -p "$dir/never" && : > "$empty"
if timeout 20 "$fibra" top "$dir/never" --interval 0.2 --wait 1 > /dev/null 2> "$dir/top-never.txt"; then
  echo "FAIL: fibra top on a log with no event exited 0"
  status=1
elif [ $? -eq 124 ]; then
  echo "FAIL: fibra top on a log with no event did not end within 20 s (its --wait was 1 s)"
  status=1
fi
grep -q "$empty has had no event in 1 s (--wait): no run writes it" "$dir/top-never.txt" ||
  { echo "FAIL: fibra top does not say the log has no event:"; cat "$dir/top-never.txt"; status=1; }
if grep -q '"ev":"end"' "$log"; then
  echo "FAIL: the killed driver's log has an end event"
  status=1
fi
"$fibra" trace "$dir" -o "$dir/trace.json" || { echo "FAIL: fibra trace could not read the killed driver's log"; status=1; }
/usr/bin/python3 "$validator" "$dir/trace.json" --log "$log" --min-attempts 100 || status=1
"$fibra" report "$dir" -o "$dir/report.html" || { echo "FAIL: fibra report could not read the killed driver's log"; status=1; }
grep -q 'id="failures"' "$dir/report.html" 2>/dev/null || { echo "FAIL: fibra report wrote no page"; status=1; }
if [ $status -eq 0 ]; then
  echo "PASS: $(done_count) chunks done before the kill; the trace of its log is valid"
  rm -rf "$dir"
else
  echo "(the log and what was made of it are kept in $dir)"
fi
exit $status
