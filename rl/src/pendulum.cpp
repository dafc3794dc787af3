// Pendulum-v1, from Gymnasium's gymnasium/envs/classic_control/pendulum.py.
#include <fibra/rl/pendulum.hpp>

#include "envs.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace fibra::rl {

Box Pendulum::observation_space() const {
  return Box{.shape = {3}, .low = {-1, -1, -max_speed}, .high = {1, 1, max_speed}};
}

Space Pendulum::action_space() const { return Box{.shape = {1}, .low = {-max_torque}, .high = {max_torque}}; }

std::span<const double> Pendulum::reset(std::uint64_t seed) {
  envs::SplitMix64 rng(seed);
  const double th = rng.uniform(-std::numbers::pi, std::numbers::pi);
  const double thdot = rng.uniform(-1.0, 1.0);
  set_state(th, thdot);
  return obs_;
}

void Pendulum::set_state(double th, double thdot, int steps) {
  th_ = th;
  thdot_ = thdot;
  steps_ = steps;
  obs_ = {std::cos(th_), std::sin(th_), thdot_};
}

double Pendulum::angle_normalize(double x) {
  constexpr double pi = std::numbers::pi, turn = 2 * pi;
  double r = std::fmod(x + pi, turn);  // Python's % takes the divisor's sign: into [0, 2 pi)
  if (r < 0) r += turn;
  return r - pi;
}

StepResult Pendulum::step(std::span<const double> action) {
  if (action.size() != 1)
    throw std::invalid_argument("Pendulum-v1: an action is one value (the torque), got " +
                                std::to_string(action.size()));
  const double u = std::clamp(action[0], -max_torque, max_torque);
  // The cost is of the state before the step, as Gymnasium's.
  const double th_norm = angle_normalize(th_);
  const double cost = th_norm * th_norm + 0.1 * thdot_ * thdot_ + 0.001 * u * u;
  double newthdot = thdot_ + (3 * g / (2 * l) * std::sin(th_) + 3.0 / (m * l * l) * u) * dt;
  newthdot = std::clamp(newthdot, -max_speed, max_speed);
  const double newth = th_ + newthdot * dt;  // with the clipped speed, as Gymnasium
  set_state(newth, newthdot, steps_ + 1);
  return {.observation = obs_, .reward = -cost, .terminated = false, .truncated = steps_ >= max_steps};
}

}  // namespace fibra::rl
