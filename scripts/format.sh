#!/usr/bin/env bash
# Formats fibra's C++ files with the pinned .clang-format (Debian 12's clang-format 14), or, with
# --check, lists those that differ from it and fails: the test suite runs the check (test "format").
# Usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format not found; scripts/install-deps.sh installs it" >&2; exit 1; }
# cmake/no_mpi/mpi.h is a guard, not code.
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' | grep -v '^cmake/no_mpi/')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --style=file "$f" | cmp -s - "$f" || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format: ${bad[*]}" >&2
    echo "format: run scripts/format.sh to format them" >&2
    exit 1
  fi
  echo "format: all ${#files[@]} files follow .clang-format"
else
  clang-format -i --style=file "${files[@]}"
fi
