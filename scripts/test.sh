#!/usr/bin/env bash
# Sets up a Debian 12 machine, builds fibra, and runs the whole test suite through ctest.
# Usage: scripts/test.sh [extra ctest arguments, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j2
# mpirun refuses to run as root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 4.1 + PMIx 4 can hang in MPI_Comm_spawn under mpirun without it (docs/architecture.md).
export EVENT_NOEPOLL=1
# Two tests at a time (FIBRA_TEST_JOBS to change it): the long fault, checkpoint and MPI cases wait
# on processes more than they compute. What cannot share the machine says so in its RESOURCE_LOCK
# (the local Slurm cluster); the virtual cluster's tests run alone (RUN_SERIAL): its bridge
# (10.213.77.1) comes and goes with them, and an MPI process started beside them that saw it at
# MPI_Init fails to bind a TCP connection once it is gone ("Cannot assign requested address",
# checkpoint.pool.mpirun in CI).
ctest --test-dir build --output-on-failure -j "${FIBRA_TEST_JOBS:-2}" "$@"
