// jobs/es/es_control.hpp: ES on environments whose actions are a box of torques (fibra::rl's Env:
// the MuJoCo bodies, Pendulum-v1): a deterministic controller, and one episode of it. No MPI and no
// fibra core here: the unit tests run it in one process.
#pragma once

#include <fibra/rl/env.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "es_core.hpp"

namespace es {

/// A deterministic controller for a box of actions: the observations normalised (mean and
/// standard deviation given, then clipped to +-5), one tanh hidden layer or none (`hidden` 0: a
/// linear map, as ARS uses), and each output squashed by tanh into its action's [low, high].
/// Parameters in one vector: with a hidden layer W1 (hidden x obs, row-major), b1, W2 (actions x
/// hidden), b2; without, W (actions x obs), b.
class Controller {
 public:
  Controller(int obs, int hidden, std::vector<double> low, std::vector<double> high)
      : obs_(obs), hidden_(hidden), low_(std::move(low)), high_(std::move(high)) {
    if (obs < 1 || hidden < 0 || low_.empty() || low_.size() != high_.size())
      throw std::invalid_argument("es: a controller needs observations, hidden units >= 0 and an action box");
    for (std::size_t a = 0; a < low_.size(); ++a)
      if (!std::isfinite(low_[a]) || !std::isfinite(high_[a]) || !(low_[a] < high_[a]))
        throw std::invalid_argument("es: action " + std::to_string(a) +
                                    " has no finite range; ES squashes its outputs into the box, so every "
                                    "action needs finite bounds");
    x_.resize(std::size_t(obs_));
    h_.resize(std::size_t(hidden_));
  }

  /// A controller for `env`'s spaces.
  /// @throws std::invalid_argument for a discrete action space or an unbounded action.
  static Controller of(const fibra::rl::Env& env, int hidden) {
    const fibra::rl::Space space = env.action_space();
    const auto* box = std::get_if<fibra::rl::Box>(&space);
    if (!box) throw std::invalid_argument("es: this environment's actions are discrete; use --env cartpole|acrobot");
    return Controller(int(env.observation_space().size()), hidden, box->low, box->high);
  }

  int observations() const { return obs_; }
  int actions() const { return int(low_.size()); }
  std::size_t parameters() const {
    const std::size_t o = std::size_t(obs_), h = std::size_t(hidden_), a = low_.size();
    return hidden_ > 0 ? h * o + h + a * h + a : a * o + a;
  }

  /// Writes actions() actions for `obs` into `out`.
  void act(const double* theta, const double* mean, const double* std, const double* obs, double* out) const {
    const std::size_t o = std::size_t(obs_), h = std::size_t(hidden_), a = low_.size();
    for (std::size_t i = 0; i < o; ++i) x_[i] = std::clamp((obs[i] - mean[i]) / std[i], -5.0, 5.0);
    const double* in = x_.data();
    std::size_t width = o;
    if (h > 0) {
      const double* b1 = theta + h * o;
      for (std::size_t j = 0; j < h; ++j) {
        double s = b1[j];
        for (std::size_t i = 0; i < o; ++i) s += theta[j * o + i] * x_[i];
        h_[j] = std::tanh(s);
      }
      theta = b1 + h;
      in = h_.data();
      width = h;
    }
    const double* b = theta + a * width;
    for (std::size_t k = 0; k < a; ++k) {
      double s = b[k];
      for (std::size_t j = 0; j < width; ++j) s += theta[k * width + j] * in[j];
      out[k] = low_[k] + (high_[k] - low_[k]) * 0.5 * (std::tanh(s) + 1.0);
    }
  }

 private:
  int obs_, hidden_;
  std::vector<double> low_, high_;
  mutable std::vector<double> x_, h_;  // scratch: one controller per thread
};

/// theta + sigma * noise, noise a stretch of the noise table.
inline std::vector<double> perturbed(const std::vector<double>& theta, const float* noise, double sigma) {
  std::vector<double> p(theta.size());
  for (std::size_t i = 0; i < theta.size(); ++i) p[i] = theta[i] + sigma * double(noise[i]);
  return p;
}

/// What one episode gave: its return (the environment's rewards, summed) and its length.
struct Outcome {
  double ret = 0;
  long steps = 0;
};

/// One episode of `env` from `seed` under the controller with parameters `theta`, `mean` and
/// `std` the observations' normalisation; the observations it saw added to `seen` if given.
inline Outcome run_episode(fibra::rl::Env& env, const Controller& c, const double* theta, const double* mean,
                           const double* std, std::uint64_t seed, ObsSums* seen) {
  std::vector<double> action(std::size_t(c.actions()));
  std::span<const double> obs = env.reset(seed);
  Outcome out;
  for (;;) {
    if (seen) {
      for (std::size_t i = 0; i < obs.size(); ++i) {
        seen->sum[i] += obs[i];
        seen->sumsq[i] += obs[i] * obs[i];
      }
      seen->count += 1;
    }
    c.act(theta, mean, std, obs.data(), action.data());
    const fibra::rl::StepResult r = env.step(action);
    out.ret += r.reward;
    ++out.steps;
    if (r.terminated || r.truncated) return out;
    obs = r.observation;
  }
}

/// Whether the pair of `pair_seed` sums its observations, for a fraction `observe` of the pairs
/// (OpenAI's implementation samples 1% of its episodes): a function of the seed alone.
inline bool observes(std::uint64_t pair_seed, double observe) {
  return double(mix(pair_seed, 0x0b5e) % 1'000'000) < observe * 1e6;
}

}  // namespace es
