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
  };
  Kind kind = Kind::go_on;
  std::size_t donor = 0;
  Config config;
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
};

std::unique_ptr<SchedulerLogic> make_scheduler(const Scheduler& s, std::uint64_t seed);

/// Where a trainable registered under a name comes from (trainables.cpp).
std::unique_ptr<Trainable> make_trainable(const std::string& name, const Config& config);
/// Whether the class trainable `name` has save() and restore() (a function trainable has not).
bool can_save(const std::string& name);
/// Whether a trainable (class or function) is registered under `name` in this process.
bool is_registered(const std::string& name);
/// The name a function trainable was registered under, or "".
std::string function_name(TrainableFunction fn);

}  // namespace fibra::tune::detail
