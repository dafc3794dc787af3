#!/usr/bin/env bash
# The benchmark suite in one command: fibra and its peers (multiprocessing, mpi4py.futures, Dask,
# IPyParallel) and the raw-MPI floor, side by side on this machine, alternating between systems.
#
#   benchmarks/run.sh [--quick] [--benchmarks b1,b2,b3,b5,b6,b8,b9,tune,es,b11,b12,b12es,esdriver] [--systems fibra,raw_mpi,...]
#                     [--repeats N] [--out DIR] [--docs]
#
# Installs what is missing (scripts/install-deps.sh), builds the benchmark programs in build/, then
# runs benchmarks/suite.py: CSVs, plots and a results table under benchmarks/results/ (results/quick/
# with --quick, a smoke run of a few minutes). --docs also refreshes docs/benchmarks.md and its plots.
# At the end it prints each of fibra's figures beside the same figure of the run before (kept in
# summary.csv) and beside its peer's from this run, and writes that table to compare.md: a
# regression shows up in the run that brings it.
# The full run takes about an hour on 2 cores; run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build build -j2 --target b1_overhead b2_throughput b3_recovery b5_idle b6_payload b8_queues b9_agents b9_simulated b9_tune raw_mpi es ppo b12_sampling b12_es es_driver
exec /usr/bin/python3 -B benchmarks/suite.py "$@"
