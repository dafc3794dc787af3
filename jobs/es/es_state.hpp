// jobs/es/es_state.hpp: the whole state of an ES run in one HDF5 file, written after every
// generation (to a temporary file, then renamed over the last: a kill leaves the old or the new,
// never half of one), readable by h5py and h5dump without fibra.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace es {

struct RunState {
  // What the run is: a state file of another configuration is refused, not resumed.
  std::string env;
  std::uint64_t seed = 0;
  std::int64_t population = 0, hidden = 0;
  double sigma = 0, lr = 0, l2 = 0;
  /// Bodies (box actions) only: the reward taken off each step in training (ARS's shift of the
  /// alive bonus), and the fraction of + episodes whose observations are summed. Files written
  /// before these existed read as 0 and 1 (what the discrete environments use).
  double shift = 0, observe = 1;
  // Where it stands after `generation` finished generations.
  std::int64_t generation = 0;
  std::vector<double> theta, adam_m, adam_v;
  double adam_t = 0;
  std::vector<double> obs_sum, obs_sumsq;
  double obs_count = 0;
  double wall_s = 0;          ///< training time so far, summed over the runs that made it
  double steps = 0;           ///< environment steps so far (0 in files written before it was kept)
  std::vector<double> curve;  ///< per generation: generation, mean, best, wall_s, steps so far (rows of 5)
};

/// Thrown for a state file that cannot be read or written, with the file and the reason.
class StateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Writes `s` to `path` (through `path`.tmp and a rename).
void save_state(const std::string& path, const RunState& s);
/// The state in `path`; nullopt when there is no such file.
std::optional<RunState> load_state(const std::string& path);
/// Empty when `saved` can be resumed by a run configured as `now`; else what differs, in words.
std::string differences(const RunState& saved, const RunState& now);
/// What the workers are given: theta, then the observations' mean and standard deviation so far (0
/// and 1 before any; deviations at least 0.01).
std::vector<double> policy_of(const RunState& s);

}  // namespace es
