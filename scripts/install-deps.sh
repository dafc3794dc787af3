#!/usr/bin/env bash
# Installs fibra's build, test and runtime dependencies from Debian 12 packages.
# Idempotent: packages already present are skipped, so a second run takes about a second.
# Usage: scripts/install-deps.sh            (needs root or passwordless sudo)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake pkg-config clang-format
  # MPI and serialization
  openmpi-bin libopenmpi-dev libboost-mpi-dev libboost-serialization-dev
  # checkpoints
  libhdf5-dev hdf5-tools python3-h5py python3-numpy
  # fibra::tune: its results read with pandas in the tests, Optuna as the peer of its benchmark
  python3-pandas python3-optuna
  # command line, config, formatting, logging
  libcli11-dev libtomlplusplus-dev libfmt-dev libspdlog-dev
  # the event log's readers (fibra trace, fibra report), and a real browser for the report's test
  nlohmann-json3-dev chromium
  # the live page's server (PoolOptions::dashboard)
  libcpp-httplib-dev
  # authenticated listeners (docs/security.md), and the fuzz targets of their decoders (clang's libFuzzer)
  libsodium-dev clang libclang-rt-14-dev
  # tests and benchmarks
  googletest libgtest-dev libbenchmark-dev
  # fibra::rl_mujoco: the MuJoCo engine and its humanoid model (issue 48)
  libmujoco-dev libmujoco-samples
  # the benchmark suite's peers and plots (benchmarks/run.sh; Debian's /usr/bin/python3)
  python3-mpi4py python3-distributed python3-ipyparallel python3-matplotlib
  # the local Slurm cluster the Slurm tests run against (slurm/local-cluster.sh)
  slurmctld slurmd slurm-client
  # the virtual nodes of the many-node tests (slurm/virtual-cluster.sh): ip, nsenter, unshare
  iproute2 util-linux
  # fibra::rl: its learner's module (libtorch, loaded by the learner alone)
  libtorch-dev
  # B11's peer: the same PPO in Python (benchmarks/peers/ppo_peer.py)
  python3-torch
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The slurmd, slurmctld and munge packages start their services on install; without systemd (a
# container, CI) that fails or leaves stray daemons. The tests start their own cluster
# (slurm/local-cluster.sh), so forbid service starts during the install when nothing else does.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod 755 /usr/sbin/policy-rc.d
  trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
fi
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
