// CartPole-v1 and Acrobot-v1 for fibra::rl: adapters over jobs/envs/envs.hpp, whose dynamics the ES
// job uses too. Nothing of the dynamics is here: only spaces, the action's layout and the spans.
#include "builtins.hpp"
#include "discrete_action.hpp"

#include "envs.hpp"

#include <limits>
#include <utility>

namespace fibra::rl::detail {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// @brief An Env over one of envs.hpp's classes (reset(seed), step(int), obs()).
template <class Inner>
class ClassicEnv : public Env {
 public:
  explicit ClassicEnv(Box observation_space) : observation_space_(std::move(observation_space)) {}

  Box observation_space() const override { return observation_space_; }
  Space action_space() const override { return Discrete{Inner::actions}; }
  std::span<const double> reset(std::uint64_t seed) override {
    inner_.reset(seed);
    return observation();
  }
  StepResult step(std::span<const double> action) override {
    const envs::Step s = inner_.step(discrete_action(action, Inner::actions, Inner::name));
    return {.observation = observation(), .reward = s.reward, .terminated = s.terminated, .truncated = s.truncated};
  }

 private:
  std::span<const double> observation() const { return {inner_.obs(), static_cast<std::size_t>(Inner::obs_size)}; }

  Inner inner_;
  Box observation_space_;
};

}  // namespace

// Gymnasium's bounds: cartpole.py's high = [2 x_threshold, inf, 2 theta_threshold, inf];
// acrobot.py's high = [1, 1, 1, 1, MAX_VEL_1, MAX_VEL_2].
std::unique_ptr<Env> make_cartpole() {
  const double x = 2 * envs::CartPole::x_threshold, theta = 2 * envs::CartPole::theta_threshold;
  return std::make_unique<ClassicEnv<envs::CartPole>>(
      Box{.shape = {4}, .low = {-x, -inf, -theta, -inf}, .high = {x, inf, theta, inf}});
}

std::unique_ptr<Env> make_acrobot() {
  const double v1 = envs::Acrobot::max_vel_1, v2 = envs::Acrobot::max_vel_2;
  return std::make_unique<ClassicEnv<envs::Acrobot>>(
      Box{.shape = {6}, .low = {-1, -1, -1, -1, -v1, -v2}, .high = {1, 1, 1, 1, v1, v2}});
}

}  // namespace fibra::rl::detail
