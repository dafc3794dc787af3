#!/usr/bin/env python3
"""Every test that GoogleTest discovery registered carries each label its CMake file names.

Usage: test_labels.py <ctest> <build dir> <list>; <list> has one "binary=label,label" per line
(written by fibra_write_discovered_gtests). gtest_discover_tests flattens a list of labels to its
first, so without the labels set after discovery `ctest -L tune` silently selected none of tune's
unit tests.
"""
import json
import subprocess
import sys


def main() -> int:
    ctest, build, listing = sys.argv[1:4]
    wanted = {}
    with open(listing) as f:
        for line in f:
            if line.strip():
                binary, labels = line.strip().split("=", 1)
                wanted[binary] = set(labels.split(","))
    shown = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"], capture_output=True, text=True,
                           timeout=60, check=True)
    found = {binary: 0 for binary in wanted}
    wrong = []
    for test in json.loads(shown.stdout)["tests"]:
        command = test.get("command") or [""]
        if command[0] not in wanted:
            continue
        found[command[0]] += 1
        labels = next((p["value"] for p in test.get("properties", []) if p["name"] == "LABELS"), [])
        missing = wanted[command[0]] - set(labels)
        if missing:
            wrong.append(f"{test['name']} ({command[0]}) lacks {', '.join(sorted(missing))}: it has "
                         f"{', '.join(labels) or 'no labels'}")
    for binary, n in found.items():
        if n == 0:
            wrong.append(f"no test runs {binary}: its discovery registered nothing")
    for w in wrong[:20]:
        print(w)
    if wrong:
        print(f"{len(wrong)} tests lack a label their CMake file names: `ctest -L` would not select them")
        return 1
    print(f"{sum(found.values())} discovered tests of {len(found)} binaries carry their labels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
