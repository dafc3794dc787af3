// tune/src/trial_host.hpp: the actor a trial runs in. One per concurrent trial; it holds one
// trainable at a time and takes the next trial when the runner starts one in it, so a trial costs
// a call, not a process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fibra/tune.hpp"

namespace fibra::tune::detail {

/// Metrics as they travel: (name, value) pairs.
using WireMetrics = std::vector<std::pair<std::string, double>>;
/// What save returns: whether the trainable can save (1) and the bytes.
using Saved = std::pair<std::int32_t, std::string>;

class TrialHost {
 public:
  TrialHost() = default;
  /// Makes the trainable `name` from `config` (bytes of encode_config), restores `checkpoint`
  /// when it is not empty, and runs its first iteration: one call, not two (an actor's calls go
  /// one batch at a time, so a start and a step were two round trips per trial).
  /// `trial` and `dir` are what this_trial() says while the trial runs here.
  WireMetrics begin(std::string name, std::string config, std::string checkpoint, std::uint64_t trial, std::string dir);
  /// One iteration.
  WireMetrics step();
  /// A checkpoint of the trial's state now.
  Saved save();
  /// Lets go of the trial it holds (a function trainable's report returns false, and the function
  /// returns), at the end of the experiment: the process itself may end without destructors.
  bool end();

 private:
  std::unique_ptr<Trainable> trainable_;
  std::string name_;
};

}  // namespace fibra::tune::detail
