// rl/src/trainer_file.hpp: PpoTrainer's checkpoint file (PpoTrainer::save, TrainerOptions::resume_from):
// its layout, written and read in one place (trainer_file.cpp), over fibra::hdf5_io's TableFile.
//
// As h5py sees it:
//   f.attrs            the run's configuration, strings: format, env, copies, workers, envs_per_worker,
//                      fragment_steps, hidden ("64,64"), activation, ppo.<every PpoConfig field>
//   f["learner"]       PpoLearner::state(), an array each: "actor.0.weight" (64 x 4), ...,
//                      "adam.exp_avg.<layer>", "adam.step", the normaliser, the counters, the shuffle
//   f["trainer"]       "iteration", "env_steps", "restarts" (int64 scalars), "recent_returns" (float64)
//   f["copies"]        every environment copy in global order: "episodes", "rng", "steps",
//                      "episode_length" (int64, one each), "episode_return" (float64, one each), and
//                      "actions" (float64, sum of episode_length rows x the action's size): the
//                      episodes in progress, copy 0's rows first
#pragma once

#include <fibra/rl/ppo.hpp>
#include <fibra/rl/sampler.hpp>
#include <fibra/rl/trainer.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fibra::rl::detail {

/// The file's format, its root attribute `format`; a reader refuses any other.
inline constexpr const char* trainer_file_format = "fibra.rl.PpoTrainer/1";

/// A configuration: (name, value) in a fixed order, the file's root attributes.
using Configuration = std::vector<std::pair<std::string, std::string>>;

/// What a PpoTrainer's file holds.
struct TrainerFile {
  Configuration configuration;
  std::vector<NamedArray> learner;
  std::uint64_t iteration = 0, env_steps = 0, restarts = 0;
  std::vector<double> recent_returns;
  std::vector<CopyState> copies;  // every copy, in global order
};

/// The run's configuration as written: everything that shapes its numbers, and the split.
Configuration configuration_of(const TrainerOptions& o);

/// Writes `file` to `path` atomically (hdf5_io's tmp + fsync + rename). `action_size` is the
/// width of the copies' action rows.
void write_trainer_file(const std::string& path, const TrainerFile& file, int action_size);

/// Reads a file write_trainer_file wrote.
/// @throws CheckpointError for a file of another format or with an array missing or malformed;
/// Hdf5Error if it cannot be read.
TrainerFile read_trainer_file(const std::string& path, int action_size);

/// The fields of `saved` that `now` has otherwise, as "name SAVED (now NOW)", joined by ", "; empty
/// if the run is the same. workers and envs_per_worker are compared through their product (copies).
std::string differences(const Configuration& saved, const Configuration& now);

}  // namespace fibra::rl::detail
