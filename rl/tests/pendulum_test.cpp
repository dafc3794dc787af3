// Pins Pendulum-v1 against Gymnasium's pendulum.py. The expected numbers were worked by hand below
// and checked with a plain-float python3 transcription of pendulum.py's step (math.sin, not this
// code): g = 10, m = 1, l = 1, dt = 0.05, max_speed = 8, max_torque = 2.
#include <fibra/rl/pendulum.hpp>

#include "envs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

namespace {

using fibra::rl::Pendulum;
constexpr double pi = std::numbers::pi;
constexpr double tol = 1e-12;

fibra::rl::StepResult step(Pendulum& env, double u) {
  const double action[] = {u};
  return env.step(action);
}

// From th = 1, thdot = 0.5, torque 1.5, then torque -0.5.
// Step 1: cost = 1^2 + 0.1 * 0.5^2 + 0.001 * 1.5^2 = 1 + 0.025 + 0.00225 = 1.02725 (reward -1.02725);
//   thdot' = 0.5 + (3 * 10 / 2 * sin 1 + 3 * 1.5) * 0.05 = 0.5 + (15 * 0.8414709848 + 4.5) * 0.05
//          = 0.5 + 0.8561032386 = 1.3561032386;
//   th' = 1 + 1.3561032386 * 0.05 = 1.0678051619; obs (cos, sin) = (0.4820483841, 0.8761445973).
// Step 2: cost = 1.0678051619^2 + 0.1 * 1.3561032386^2 + 0.001 * 0.25
//              = 1.1402078638 + 0.1839015994 + 0.00025 = 1.3243594632;
//   thdot'' = 1.3561032386 + (15 * sin 1.0678051619 - 1.5) * 0.05
//           = 1.3561032386 + (15 * 0.8761445973 - 1.5) * 0.05 = 1.9382116866;
//   th'' = 1.0678051619 + 1.9382116866 * 0.05 = 1.1647157463.
TEST(Pendulum, TwoStepsPinnedByHand) {
  Pendulum env;
  env.set_state(1.0, 0.5);
  fibra::rl::StepResult r = step(env, 1.5);
  EXPECT_NEAR(r.reward, -1.02725, tol);
  EXPECT_NEAR(env.state()[0], 1.0678051619302962, tol);
  EXPECT_NEAR(env.state()[1], 1.3561032386059226, tol);
  ASSERT_EQ(r.observation.size(), 3u);
  EXPECT_NEAR(r.observation[0], 0.48204838409011624, tol);
  EXPECT_NEAR(r.observation[1], 0.8761445973103457, tol);
  EXPECT_NEAR(r.observation[2], 1.3561032386059226, tol);
  EXPECT_FALSE(r.terminated);
  EXPECT_FALSE(r.truncated);

  r = step(env, -0.5);
  EXPECT_NEAR(r.reward, -1.3243594632207343, tol);
  EXPECT_NEAR(env.state()[0], 1.1647157462597302, tol);
  EXPECT_NEAR(env.state()[1], 1.9382116865886818, tol);
  EXPECT_NEAR(r.observation[0], 0.3950116942988777, tol);
  EXPECT_NEAR(r.observation[1], 0.9186760916488085, tol);
  EXPECT_NEAR(r.observation[2], 1.9382116865886818, tol);
  EXPECT_EQ(env.steps(), 2);
}

// Torque 5 acts as 2, torque -7 as -2, in the dynamics and the cost: from rest at th = 0,
// thdot' = (0 + 3 * 2) * 0.05 = 0.3, th' = 0.3 * 0.05 = 0.015, cost = 0.001 * 2^2 = 0.004.
TEST(Pendulum, TorqueIsClipped) {
  Pendulum env;
  env.set_state(0.0, 0.0);
  fibra::rl::StepResult r = step(env, 5.0);
  EXPECT_NEAR(r.reward, -0.004, tol);
  EXPECT_NEAR(env.state()[1], 0.3, tol);
  EXPECT_NEAR(env.state()[0], 0.015, tol);

  env.set_state(0.0, 0.0);
  r = step(env, -7.0);
  EXPECT_NEAR(r.reward, -0.004, tol);
  EXPECT_NEAR(env.state()[1], -0.3, tol);
  EXPECT_NEAR(env.state()[0], -0.015, tol);
}

// th = pi/2, thdot = 7.9, torque 2: thdot' = 7.9 + (15 * 1 + 6) * 0.05 = 8.95, clipped to 8;
// th' = pi/2 + 8 * 0.05 = 1.9707963268 (the clipped speed moves the angle);
// cost = (pi/2)^2 + 0.1 * 7.9^2 + 0.001 * 4 = 2.4674011003 + 6.241 + 0.004 = 8.7124011003.
// Mirrored (all signs flipped) it clips at -8.
TEST(Pendulum, SpeedIsClipped) {
  Pendulum env;
  env.set_state(pi / 2, 7.9);
  fibra::rl::StepResult r = step(env, 2.0);
  EXPECT_EQ(env.state()[1], 8.0);
  EXPECT_NEAR(env.state()[0], 1.9707963267948965, tol);
  EXPECT_NEAR(r.reward, -8.71240110027234, tol);

  env.set_state(-pi / 2, -7.9);
  r = step(env, -2.0);
  EXPECT_EQ(env.state()[1], -8.0);
  EXPECT_NEAR(env.state()[0], -1.9707963267948965, tol);
  EXPECT_NEAR(r.reward, -8.71240110027234, tol);
}

// angle_normalize(x) = ((x + pi) mod 2 pi) - pi, Python's modulus (never negative): into [-pi, pi).
TEST(Pendulum, AngleNormalisation) {
  EXPECT_NEAR(Pendulum::angle_normalize(pi), -pi, tol);  // the upper end maps to the lower
  EXPECT_NEAR(Pendulum::angle_normalize(-pi), -pi, tol);
  EXPECT_NEAR(Pendulum::angle_normalize(7.0), 7.0 - 2 * pi, tol);    // 0.7168146928
  EXPECT_NEAR(Pendulum::angle_normalize(-7.0), -7.0 + 2 * pi, tol);  // -0.7168146928
  EXPECT_NEAR(Pendulum::angle_normalize(4.0), 4.0 - 2 * pi, tol);    // -2.2831853072
  EXPECT_NEAR(Pendulum::angle_normalize(0.5), 0.5, tol);
  EXPECT_NEAR(Pendulum::angle_normalize(3 * pi), -pi, tol);

  // The cost uses the normalised angle, the state keeps the raw one: th = 4, at rest, no torque:
  // cost = (4 - 2 pi)^2 = (-2.2831853072)^2 = 5.2129351469.
  Pendulum env;
  env.set_state(4.0, 0.0);
  const fibra::rl::StepResult r = step(env, 0.0);
  EXPECT_NEAR(r.reward, -5.212935146920741, tol);
  EXPECT_GT(env.state()[0], pi);  // not wrapped, as in Gymnasium
}

TEST(Pendulum, TruncatedAtTwoHundredSteps) {
  Pendulum env;
  env.reset(3);
  for (int i = 1; i < 200; ++i) {
    const fibra::rl::StepResult r = step(env, 1.0);
    ASSERT_FALSE(r.truncated) << "step " << i;
    ASSERT_FALSE(r.terminated) << "step " << i;
  }
  const fibra::rl::StepResult r = step(env, 1.0);
  EXPECT_TRUE(r.truncated);
  EXPECT_FALSE(r.terminated);  // Pendulum never terminates
  EXPECT_EQ(env.steps(), 200);
  env.reset(3);
  EXPECT_EQ(env.steps(), 0);
}

TEST(Pendulum, ResetDrawsAngleThenSpeedFromSplitMix64) {
  for (std::uint64_t seed : {0ull, 1ull, 99ull, 0xDEADBEEFull}) {
    envs::SplitMix64 rng(seed);
    const double th = -pi + 2 * pi * rng.uniform(), thdot = -1.0 + 2.0 * rng.uniform();
    Pendulum env;
    const std::span<const double> obs = env.reset(seed);
    ASSERT_EQ(obs.size(), 3u);
    EXPECT_NEAR(env.state()[0], th, tol);
    EXPECT_NEAR(env.state()[1], thdot, tol);
    EXPECT_NEAR(obs[0], std::cos(th), tol);
    EXPECT_NEAR(obs[1], std::sin(th), tol);
    EXPECT_NEAR(obs[2], thdot, tol);
    EXPECT_GE(env.state()[0], -pi);
    EXPECT_LT(env.state()[0], pi);
    EXPECT_GE(env.state()[1], -1.0);
    EXPECT_LT(env.state()[1], 1.0);
  }
}

TEST(Pendulum, Spaces) {
  Pendulum env;
  const fibra::rl::Box obs = env.observation_space();
  EXPECT_EQ(obs.shape, (std::vector<std::size_t>{3}));
  EXPECT_EQ(obs.low, (std::vector<double>{-1, -1, -8}));
  EXPECT_EQ(obs.high, (std::vector<double>{1, 1, 8}));
  const fibra::rl::Space action = env.action_space();
  ASSERT_TRUE(std::holds_alternative<fibra::rl::Box>(action));
  EXPECT_EQ(std::get<fibra::rl::Box>(action).shape, (std::vector<std::size_t>{1}));
  EXPECT_EQ(std::get<fibra::rl::Box>(action).low, (std::vector<double>{-2}));
  EXPECT_EQ(std::get<fibra::rl::Box>(action).high, (std::vector<double>{2}));
  EXPECT_EQ(fibra::rl::action_size(action), 1u);
}

TEST(Pendulum, ActionOfWrongSizeIsRejected) {
  Pendulum env;
  env.reset(0);
  const double two[] = {0.0, 1.0};
  EXPECT_THROW(env.step(two), std::invalid_argument);
  EXPECT_THROW(env.step(std::span<const double>()), std::invalid_argument);
}

}  // namespace
