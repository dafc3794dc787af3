#!/usr/bin/env bash
# Sets up a Debian 12 machine, builds fibra, and runs the demo job: an evolution strategy whose
# population is evaluated on 4 local workers spawned with MPI_Comm_spawn.
# Usage: scripts/demo.sh [es arguments, e.g. --workers 8 --generations 50]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j2 --target es
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 4.1 + PMIx 4 can hang in MPI_Comm_spawn under mpirun without it (docs/architecture.md).
export EVENT_NOEPOLL=1
build/jobs/es "$@"
