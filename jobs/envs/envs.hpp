#pragma once
// Control environments for fibra's jobs (ES, RL rollouts): Gymnasium's CartPole-v1 and Acrobot-v1,
// with its dynamics, constants, termination rules, rewards and step limits (the TimeLimit wrapper
// that gymnasium.make adds), header-only and deterministic given a seed on every platform.
//
//   envs::CartPole env;
//   env.reset(seed);
//   double ret = 0;
//   for (envs::Step s; !s.terminated && !s.truncated; ret += s.reward) s = env.step(policy(env.obs()));
//
// Sources: gymnasium/envs/classic_control/{cartpole,acrobot}.py and gymnasium/envs/__init__.py
// (step limits, reward thresholds). Differences: observations are doubles (Gymnasium's are
// float32), and the start state comes from envs::SplitMix64, not NumPy's generator, so a seed
// names a different (but equally distributed) start than in Gymnasium.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>

namespace envs {

/// @brief What one step returned: Gymnasium's (reward, terminated, truncated).
struct Step {
  double reward = 0;
  bool terminated = false;  ///< the task's own end (the pole fell, the tip reached the line)
  bool truncated = false;   ///< the step limit; may be true together with terminated, as in Gymnasium
};

/// @brief fibra's portable generator: splitmix64 (Steele, Lea, Flood 2014), whose integer
/// arithmetic gives the same sequence under every compiler and standard library, unlike
/// std::uniform_real_distribution.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  /// @brief The next 64 random bits.
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// @brief A double in [0, 1): the top 53 bits, each value a multiple of 2^-53.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// @brief A double in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

 private:
  std::uint64_t state_;
};

/// @brief Gymnasium's CartPole-v1: a pole hinged on a cart; push the cart left or right to keep
/// the pole up. Reward 1 per step (the terminating one too); terminated when |x| > 2.4 or
/// |theta| > 12 degrees; truncated at 500 steps. Euler integration, as Gymnasium's default.
class CartPole {
 public:
  static constexpr int obs_size = 4, actions = 2, max_steps = 500;
  static constexpr double solved = 475.0;  ///< mean return over 100 episodes (Gymnasium's reward_threshold)
  static constexpr const char* name = "CartPole-v1";

  static constexpr double gravity = 9.8, masscart = 1.0, masspole = 0.1;
  static constexpr double length = 0.5;  ///< half the pole's length, as Gymnasium names it
  static constexpr double force_mag = 10.0, tau = 0.02;
  static constexpr double x_threshold = 2.4;
  static constexpr double theta_threshold = 12 * 2 * std::numbers::pi / 360;  // Gymnasium's expression, same rounding

  /// @brief Starts an episode: x, x_dot, theta, theta_dot each ~ U(-0.05, 0.05), drawn in that
  /// order from SplitMix64(seed).
  void reset(std::uint64_t seed) {
    SplitMix64 rng(seed);
    std::array<double, 4> s;
    for (double& v : s) v = rng.uniform(-0.05, 0.05);
    set_state(s[0], s[1], s[2], s[3]);
  }
  /// @brief For tests and replays: puts the system in a given state, `steps` steps into an episode
  /// that has not terminated.
  void set_state(double x, double x_dot, double theta, double theta_dot, int steps = 0) {
    state_ = {x, x_dot, theta, theta_dot};
    steps_ = steps;
    terminated_ = false;
  }
  /// @brief x, x_dot, theta, theta_dot (theta in radians, 0 upright).
  const double* obs() const { return state_.data(); }
  /// @brief Advances tau seconds. @param action 0: push left, 1: push right.
  /// @throws std::out_of_range for another action.
  Step step(int action) {
    if (action != 0 && action != 1)
      throw std::out_of_range(std::string(name) + ": action " + std::to_string(action) +
                              " is neither 0 (push left) nor 1 (push right)");
    auto [x, x_dot, theta, theta_dot] = state_;
    const double force = action == 1 ? force_mag : -force_mag;
    const double total_mass = masspole + masscart, polemass_length = masspole * length;
    const double cos_t = std::cos(theta), sin_t = std::sin(theta);
    // Florian, "Correct equations for the dynamics of the cart-pole system" (2007), with no friction.
    const double temp = (force + polemass_length * (theta_dot * theta_dot) * sin_t) / total_mass;
    const double theta_acc =
        (gravity * sin_t - cos_t * temp) / (length * (4.0 / 3.0 - masspole * (cos_t * cos_t) / total_mass));
    const double x_acc = temp - polemass_length * theta_acc * cos_t / total_mass;
    // Explicit Euler: positions move with the old velocities.
    state_ = {x + tau * x_dot, x_dot + tau * x_acc, theta + tau * theta_dot, theta_dot + tau * theta_acc};
    ++steps_;

    Step out;
    out.terminated = state_[0] < -x_threshold || state_[0] > x_threshold || state_[2] < -theta_threshold ||
                     state_[2] > theta_threshold;
    // 1 up to and including the step that ends the episode; 0 for steps past it, as Gymnasium.
    out.reward = terminated_ ? 0.0 : 1.0;
    terminated_ = terminated_ || out.terminated;
    out.truncated = steps_ >= max_steps;
    return out;
  }
  /// @brief Steps since reset (or the count given to set_state).
  int steps() const { return steps_; }

 private:
  std::array<double, 4> state_{};
  int steps_ = 0;
  bool terminated_ = false;  // a step has terminated since reset: later steps earn 0
};

/// @brief Gymnasium's Acrobot-v1: two links hanging from a pivot, torque (-1, 0, +1) on the joint
/// between them; swing the tip above the line one link length over the pivot. Reward -1 per step,
/// 0 on the step that reaches the line (which terminates); truncated at 500 steps. Sutton and
/// Barto's "book" dynamics, one RK4 step of 0.2 s; angles wrapped to [-pi, pi], velocities clipped.
class Acrobot {
 public:
  static constexpr int obs_size = 6, actions = 3, max_steps = 500;
  static constexpr double solved = -100.0;  ///< mean return over 100 episodes (Gymnasium's reward_threshold)
  static constexpr const char* name = "Acrobot-v1";

  static constexpr double dt = 0.2, gravity = 9.8;
  static constexpr double link_length_1 = 1.0;  // the second link's length (1) enters only the drawing
  static constexpr double link_mass_1 = 1.0, link_mass_2 = 1.0;
  static constexpr double link_com_pos_1 = 0.5, link_com_pos_2 = 0.5;  ///< pivot to center of mass
  static constexpr double link_moi = 1.0;                              ///< moment of inertia of each link
  static constexpr double max_vel_1 = 4 * std::numbers::pi, max_vel_2 = 9 * std::numbers::pi;
  static constexpr std::array<double, 3> torques = {-1.0, 0.0, 1.0};

  /// @brief Starts an episode: theta1, theta2, dtheta1, dtheta2 each ~ U(-0.1, 0.1), drawn in that
  /// order from SplitMix64(seed).
  void reset(std::uint64_t seed) {
    SplitMix64 rng(seed);
    std::array<double, 4> s;
    for (double& v : s) v = rng.uniform(-0.1, 0.1);
    set_state(s[0], s[1], s[2], s[3]);
  }
  /// @brief For tests and replays: puts the system in a given state (angles in radians, theta1
  /// from straight down, theta2 relative to the first link), `steps` steps into an episode.
  void set_state(double theta1, double theta2, double dtheta1, double dtheta2, int steps = 0) {
    state_ = {theta1, theta2, dtheta1, dtheta2};
    steps_ = steps;
    obs_ = {std::cos(theta1), std::sin(theta1), std::cos(theta2), std::sin(theta2), dtheta1, dtheta2};
  }
  /// @brief cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2.
  const double* obs() const { return obs_.data(); }
  /// @brief The state as set_state takes it: theta1, theta2, dtheta1, dtheta2.
  const std::array<double, 4>& state() const { return state_; }
  /// @brief Advances dt seconds. @param action 0, 1, 2: torque -1, 0, +1.
  /// @throws std::out_of_range for another action.
  Step step(int action) {
    if (action < 0 || action >= actions)
      throw std::out_of_range(std::string(name) + ": action " + std::to_string(action) +
                              " is not 0, 1 or 2 (torque -1, 0, +1)");
    const double torque = torques[action];
    const State s = state_;
    // Classic RK4 over [0, dt], the torque held.
    const State k1 = derivatives(s, torque);
    const State k2 = derivatives(add(s, dt / 2.0, k1), torque);
    const State k3 = derivatives(add(s, dt / 2.0, k2), torque);
    const State k4 = derivatives(add(s, dt, k3), torque);
    State n;
    for (int i = 0; i < 4; ++i) n[i] = s[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    // Limits apply to the step's result only, not inside the integration (as Gymnasium).
    set_state(wrap(n[0]), wrap(n[1]), std::clamp(n[2], -max_vel_1, max_vel_1), std::clamp(n[3], -max_vel_2, max_vel_2),
              steps_ + 1);

    Step out;
    // The tip is above the line at height 1 over the pivot (heights counted upward, links of length 1).
    out.terminated = -std::cos(state_[0]) - std::cos(state_[1] + state_[0]) > 1.0;
    out.reward = out.terminated ? 0.0 : -1.0;
    out.truncated = steps_ >= max_steps;
    return out;
  }
  /// @brief Steps since reset (or the count given to set_state).
  int steps() const { return steps_; }

 private:
  using State = std::array<double, 4>;

  static State add(const State& s, double h, const State& k) {
    return {s[0] + h * k[0], s[1] + h * k[1], s[2] + h * k[2], s[3] + h * k[3]};
  }
  // Into [-pi, pi] by whole turns; a value already inside is left as it is, pi included.
  static double wrap(double a) {
    constexpr double pi = std::numbers::pi, turn = 2 * pi;
    while (a > pi) a -= turn;
    while (a < -pi) a += turn;
    return a;
  }
  // Sutton and Barto (1998), section 11.3, the "book" variant of the second joint's acceleration.
  static State derivatives(const State& s, double torque) {
    constexpr double m1 = link_mass_1, m2 = link_mass_2, l1 = link_length_1, lc1 = link_com_pos_1, lc2 = link_com_pos_2,
                     i1 = link_moi, i2 = link_moi, g = gravity, pi = std::numbers::pi;
    const double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    const double d1 = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * std::cos(theta2)) + i1 + i2;
    const double d2 = m2 * (lc2 * lc2 + l1 * lc2 * std::cos(theta2)) + i2;
    const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - pi / 2.0);
    const double phi1 = -m2 * l1 * lc2 * dtheta2 * dtheta2 * std::sin(theta2) -
                        2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                        (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - pi / 2) + phi2;
    const double ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1 * dtheta1 * std::sin(theta2) - phi2) /
                            (m2 * lc2 * lc2 + i2 - d2 * d2 / d1);
    const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    return {dtheta1, dtheta2, ddtheta1, ddtheta2};
  }

  State state_{};
  std::array<double, 6> obs_{1, 0, 1, 0, 0, 0};
  int steps_ = 0;
};

}  // namespace envs
