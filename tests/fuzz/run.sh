#!/usr/bin/env bash
# Builds fibra's fuzz targets with clang (tests/fuzz/CMakeLists.txt) into <build>/fuzz and runs each
# for FIBRA_FUZZ_SECONDS (10; longer by hand: FIBRA_FUZZ_SECONDS=3600 tests/fuzz/run.sh build) on a
# copy of its committed corpus (tests/fuzz/corpus/<target>), with a 256 MB allocation bound: an
# input that makes a decoder allocate what it merely announces fails like a crash. What a run finds
# is left in <build>/fuzz/<target>.crash-*; add it to the corpus once fixed.
#   run.sh <build folder> [target...]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "$1" && pwd)/fuzz"
shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_wire fuzz_join_file fuzz_job_spec fuzz_journal fuzz_lane)
seconds="${FIBRA_FUZZ_SECONDS:-10}"
command -v clang++ >/dev/null || { echo "FAIL: clang++ is not installed (scripts/install-deps.sh installs it)"; exit 1; }
mkdir -p "$build"
if ! cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None >"$build/configure.log" 2>&1; then
  tail -20 "$build/configure.log"; echo "FAIL: the fuzz targets do not configure"; exit 1
fi
if ! cmake --build "$build" -j2 --target "${targets[@]}" >"$build/build.log" 2>&1; then
  grep -E "error|Error" "$build/build.log" | head -20; echo "FAIL: the fuzz targets do not build"; exit 1
fi
failed=0
for t in "${targets[@]}"; do
  work="$build/$t.corpus"
  rm -rf "$work" && mkdir -p "$work"
  [ -d "$here/corpus/$t" ] && cp "$here/corpus/$t"/* "$work"/ 2>/dev/null
  # -timeout: one input at most 10 s; -rss_limit_mb/-malloc_limit_mb: a bound on what an input may allocate
  if "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
       -artifact_prefix="$build/$t." -print_final_stats=1 "$work" >"$build/$t.log" 2>&1; then
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/$t.log")"
    echo "$t: ${runs:-?} inputs in ${seconds} s, nothing found"
  else
    failed=1
    grep -E "ERROR|SUMMARY|==[0-9]+==|runtime error|out-of-memory|malloc" "$build/$t.log" | head -15
    echo "FAIL: $t found an input that breaks it (in $build/$t.*; the log is $build/$t.log)"
  fi
done
[ "$failed" -eq 0 ] && echo "PASS: ${#targets[@]} fuzz targets ran ${seconds} s each, nothing found"
exit "$failed"
