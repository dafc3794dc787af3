// fibra/rl/normaliser.hpp: running observation normalisation, shared by every rollout worker.
//
// Workers normalise with the statistics that came with the weights they hold and send back the
// moments of the raw observations they saw (Fragment::raw_moments); the learner merges them, in the
// order of the environment copies' global indices, into the one ObsNormaliser it ships with the next
// weights. So every copy of the policy sees the same normalisation, whatever the number of workers.
//
//   fibra::rl::ObsMoments m(4);
//   m.add(row);                              // a raw observation of 4 values
//   fibra::rl::ObsNormaliser norm(4);
//   norm.merge(m);                            // Chan et al.'s parallel update
//   norm.normalise(raw_rows, normalised);     // clip((x - mean) / sqrt(var + 1e-8), -10, 10)
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace fibra::rl {

/// @brief The count, mean and sum of squared deviations (M2) of a set of observation rows, per
/// component: Welford's update row by row, Chan, Golub and LeVeque's formula to merge two sets.
struct ObsMoments {
  std::uint64_t count = 0;
  std::vector<double> mean;  ///< size() values; zero while count is 0
  std::vector<double> m2;    ///< size() values: the sum over rows of (x - mean)^2

  ObsMoments() = default;
  /// @brief No rows yet, of `size` components each.
  explicit ObsMoments(int size) : mean(static_cast<std::size_t>(size), 0.0), m2(static_cast<std::size_t>(size), 0.0) {}

  int size() const { return static_cast<int>(mean.size()); }
  /// @brief Adds one row of size() values (Welford).
  /// @throws std::invalid_argument for a row of another size.
  void add(std::span<const double> row);
  /// @brief Adds `other`'s rows (Chan et al.: the result equals the moments of both sets' rows
  /// together, up to rounding). An empty ObsMoments (size 0) merges as nothing.
  /// @throws std::invalid_argument for moments of another size.
  void merge(const ObsMoments& other);
  /// @brief The population variance of component i (M2 / count); 1 while count is 0.
  double variance(int i) const;

  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& count& mean& m2;
  }
};

/// @brief Running observation normalisation as Gymnasium's NormalizeObservation:
/// clip((x - mean) / sqrt(var + epsilon), -clip, clip), with the population variance of every row
/// merged so far. Before any row, mean 0 and variance 1. A disabled normaliser copies its input.
class ObsNormaliser {
 public:
  double clip = 10.0;
  double epsilon = 1e-8;
  bool enabled = true;

  ObsNormaliser() = default;
  /// @brief No statistics yet, for observations of `size` values; `enabled` false copies.
  explicit ObsNormaliser(int size, bool enabled = true) : enabled(enabled), moments_(size) {}

  int size() const { return moments_.size(); }
  /// @brief Merges the moments of more raw observations.
  /// @throws std::invalid_argument for moments of another size.
  void merge(const ObsMoments& moments) { moments_.merge(moments); }
  /// @brief Normalises rows of size() raw values (`in`) into `out` (the same number of values).
  /// @throws std::invalid_argument if the sizes differ or are not whole rows.
  void normalise(std::span<const double> in, std::span<float> out) const;
  /// @brief Everything merged so far.
  const ObsMoments& moments() const { return moments_; }
  /// @brief For checkpoints: replaces the statistics.
  void set_moments(ObsMoments moments) { moments_ = std::move(moments); }

  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& clip& epsilon& enabled& moments_;
  }

 private:
  ObsMoments moments_;
};

}  // namespace fibra::rl
