// tune/src/internal.hpp: the parts of fibra::tune shared by its sources and unit tests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fibra/tune.hpp"

namespace fibra::tune::detail {

// Seeded draws (space.cpp).
std::uint64_t splitmix(std::uint64_t& state);
double unit(std::uint64_t& state);
Value draw(const Domain& d, std::uint64_t& state);

// A configuration as bytes, for the trial's process (space.cpp).
std::string encode_config(const Config& c);
Config decode_config(std::string_view bytes);

/// numpy.percentile's default (linear between closest ranks), q in [0, 100]; NaN for no values.
double percentile(std::vector<double> values, double q);

/// What a scheduler decides after a trial's result.
struct Decision {
  enum class Kind {
    go_on,    ///< next iteration
    stop,     ///< stopped early
    done,     ///< reached the scheduler's end (max_t)
    save,     ///< go on, after saving a checkpoint the scheduler may hand to others (PBT's top)
    exploit,  ///< restore `donor`'s saved checkpoint with `config`, then go on (PBT's bottom)
    pause,    ///< save a checkpoint and give up the host: it waits at a rung (HyperBand) until a Ruling
  };
  Kind kind = Kind::go_on;
  std::size_t donor = 0;
  Config config;
};

/// What a scheduler decided about a trial that waits at a rung (Decision::Kind::pause) once the
/// rung is decided: go_on (it starts again from its checkpoint) or stop.
struct Ruling {
  std::size_t trial = 0;
  Decision::Kind kind = Decision::Kind::go_on;
  friend bool operator==(const Ruling&, const Ruling&) = default;
};

/// A scheduler's rule. Scores are "higher is better" (a min-mode metric arrives negated); NaN
/// when the trial did not report the metric.
class SchedulerLogic {
 public:
  virtual ~SchedulerLogic() = default;
  virtual Decision on_result(std::size_t trial, double time, double score, const Config& config) = 0;
  /// Whether a result at `time` may decide anything for the trial (a rung, max_t, a perturbation).
  virtual bool may_decide(std::size_t /*trial*/, double /*time*/) const { return true; }
  /// The trial ended (any way): it no longer counts among the live ones.
  virtual void on_end(std::size_t /*trial*/) {}
  /// The rulings made since the last call (a rung decided by a result or an end), best first.
  virtual std::vector<Ruling> take_rulings() { return {}; }
  /// Whether the trial waits at a rung not yet decided (after a resume: it is not started).
  virtual bool waiting(std::size_t /*trial*/) const { return false; }
};

/// `trials`: how many the experiment has (HyperBand puts them in brackets by id).
std::unique_ptr<SchedulerLogic> make_scheduler(const Scheduler& s, std::uint64_t seed, std::size_t trials = 0);

/// One bracket of HyperBand as the paper plans it: `n` trials starting with `r` of time, and at
/// rung i (i = 0..s) n_i = floor(n * eta^-i) trials run to milestones[i] = max_t * eta^(i - s).
struct HyperBandBracket {
  int s = 0;
  std::size_t n = 0;
  double r = 0;
  std::vector<std::size_t> sizes;
  std::vector<double> milestones;
};
/// The brackets s = s_max..0 of one round (hyperband.cpp). @throws ConfigError for bad options.
std::vector<HyperBandBracket> hyperband_brackets(double max_t, double reduction_factor);
std::unique_ptr<SchedulerLogic> make_hyperband(const HyperBand& h, std::size_t trials);

/// Where a trainable registered under a name comes from (trainables.cpp).
std::unique_ptr<Trainable> make_trainable(const std::string& name, const Config& config);
/// Whether the class trainable `name` has save() and restore() (a function trainable has not).
bool can_save(const std::string& name);
/// Whether a trainable (class or function) is registered under `name` in this process.
bool is_registered(const std::string& name);
/// The name a function trainable was registered under, or "".
std::string function_name(TrainableFunction fn);

}  // namespace fibra::tune::detail
