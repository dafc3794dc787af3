#!/usr/bin/env bash
# Sets up a Debian 12 machine, builds fibra, and runs the demo job: an evolution strategy
# (OpenAI-ES, jobs/es) that learns to balance CartPole-v1, its population evaluated on 4 local
# workers spawned with MPI_Comm_spawn; it prints a line per generation and the final score over
# 100 episodes, and writes the learning curve as CSV and PNG in build/demo/.
# Usage: scripts/demo.sh [es arguments, e.g. --env acrobot --workers 8 --seed 3]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j2 --target es
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 4.1 + PMIx 4 can hang in MPI_Comm_spawn under mpirun without it (docs/architecture.md).
export EVENT_NOEPOLL=1
mkdir -p build/demo
cd build/demo
env_name=cartpole title=CartPole-v1 target=475
for a in "$@"; do
  if [ "$a" = acrobot ]; then env_name=acrobot title=Acrobot-v1 target=-100; fi
done
rm -f "es-$env_name.csv" "es-$env_name.png"
status=0
../jobs/es --workers 4 "$@" || status=$?
if [ -s "es-$env_name.csv" ]; then
  /usr/bin/python3 ../../jobs/es/plot_curve.py "es-$env_name.csv" "es-$env_name.png" --target "$target" --title "$title"
  echo "demo: learning curve in $PWD/es-$env_name.csv and $PWD/es-$env_name.png"
fi
exit $status
