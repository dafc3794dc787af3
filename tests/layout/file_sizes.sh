#!/bin/sh
# No file under src/ over 800 lines: a file that grows past it holds more than one responsibility,
# and is split by them (docs/architecture.md, "Where things are"). Prints the ones over, and fails.
cd "$(dirname "$0")/../.." || exit 2
over=$(find src -name '*.cpp' -o -name '*.hpp' | sort | while read -r f; do
  n=$(wc -l < "$f")
  [ "$n" -gt 800 ] && echo "$f: $n lines"
done)
if [ -n "$over" ]; then
  echo "files under src/ over 800 lines (split them by responsibility):"
  echo "$over"
  exit 1
fi
echo "every file under src/ is at most 800 lines"
