#!/usr/bin/env bash
# The data path side by side (docs/benchmarks.md, "64 MiB without the needless copies"): 5 rounds,
# each running in turn raw MPI's floor, fibra's round trip, fibra's 64 MiB round trip (the driver's
# allocator as it is, the default), the same with the driver keeping its freed memory
# (--driver-keep-freed-mib 256), and with every batch through MPI and the agents (FIBRA_LANES=0).
# Rows go to <out>/*.csv.
#
#   benchmarks/data_path.sh [out-folder, default /tmp/data_path]   (after building into build/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/data_path}
rm -rf "$out"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EVENT_NOEPOLL=1 FIBRA_PROGRESS=0
export OMPI_MCA_rmaps_base_oversubscribe=1
uptime > "$out/load.txt"
for _ in 1 2 3 4 5; do
  build/benchmarks/raw_mpi --repeats 1 --roundtrips 3000 --payload-repeats 3 --spawn 0 | grep -v '^#' >> "$out/raw.csv"
  build/benchmarks/b2_throughput --workers 1 --map-tasks 10 --async-tasks 10 --roundtrips 3000 --repeats 1 |
    grep roundtrip >> "$out/roundtrip.csv"
  build/benchmarks/b6_payload --repeats 3 | grep payload >> "$out/b6.csv"
  build/benchmarks/b6_payload --repeats 3 --driver-keep-freed-mib 256 | grep payload >> "$out/b6_driver_keep.csv"
  FIBRA_LANES=0 build/benchmarks/b6_payload --repeats 3 | grep payload >> "$out/b6_no_lanes.csv"
done
uptime >> "$out/load.txt"
echo "rows in $out: raw.csv roundtrip.csv b6.csv b6_driver_keep.csv b6_no_lanes.csv"
