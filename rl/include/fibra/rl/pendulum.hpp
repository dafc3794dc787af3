// fibra/rl/pendulum.hpp: Gymnasium's Pendulum-v1, the built-in with continuous actions.
#pragma once

#include <fibra/rl/env.hpp>

#include <array>
#include <cstdint>
#include <span>

namespace fibra::rl {

/// @brief Gymnasium's Pendulum-v1 (gymnasium/envs/classic_control/pendulum.py): swing a pendulum
/// up and hold it upright with a torque in [-2, 2]. Observation cos th, sin th, thdot (th = 0
/// upright); reward -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2) from the state before the
/// step and the clipped torque; never terminates; truncated at 200 steps (gymnasium.make's
/// TimeLimit). Differences: doubles, not float32, and the start state comes from envs::SplitMix64.
class Pendulum : public Env {
 public:
  static constexpr double g = 10.0, m = 1.0, l = 1.0, dt = 0.05;
  static constexpr double max_speed = 8.0, max_torque = 2.0;
  static constexpr int max_steps = 200;

  Box observation_space() const override;
  Space action_space() const override;
  /// @brief th ~ U(-pi, pi), then thdot ~ U(-1, 1), drawn in that order from SplitMix64(seed).
  std::span<const double> reset(std::uint64_t seed) override;
  /// @brief One step of dt with torque action[0], clipped to [-max_torque, max_torque].
  StepResult step(std::span<const double> action) override;

  /// @brief For tests and replays: th (radians, not wrapped) and thdot, `steps` steps into an episode.
  void set_state(double th, double thdot, int steps = 0);
  /// @brief th, thdot; th is never wrapped, as in Gymnasium.
  std::array<double, 2> state() const { return {th_, thdot_}; }
  int steps() const { return steps_; }

  /// @brief Into [-pi, pi): ((x + pi) mod 2 pi) - pi with a non-negative modulus, as Gymnasium's
  /// angle_normalize.
  static double angle_normalize(double x);

 private:
  double th_ = 0, thdot_ = 0;
  int steps_ = 0;
  std::array<double, 3> obs_{1, 0, 0};
};

}  // namespace fibra::rl
