// fibra/tune.hpp: fibra::tune, hyper-parameter search (Ray Tune's model) on fibra's actors; its
// headers are in fibra/tune/, as fibra::rl's in fibra/rl/, fibra::hdf5_io's in fibra/hdf5_io/ and
// fibra::slurm's in fibra/slurm/. docs/tune.md.
//
//   tune/tune.hpp   fibra::tune::run, Trainable, Config, the search spaces, schedulers (ASHA, PBT,
//                   HyperBand), searchers, results and resume
#pragma once

#include "fibra/tune/tune.hpp"  // IWYU pragma: export
