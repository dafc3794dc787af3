// Pins envs.hpp against Gymnasium's published equations. Every constant is written here again, not
// read from the header, so a wrong constant there fails a test. Values marked "python3" were computed
// by a plain-float transcription of Gymnasium's cartpole.py and acrobot.py (math.cos, no NumPy), kept
// beside this file as reference.py.
#include "envs.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numbers>

namespace {

constexpr double pi = std::numbers::pi;

// ---- CartPole ---------------------------------------------------------------------------------

// CartPole-v1's step written out again from Florian (2007) and Gymnasium's constants.
std::array<double, 4> cartpole_reference(std::array<double, 4> s, int action) {
  const double g = 9.8, m_cart = 1.0, m_pole = 0.1, half_len = 0.5, f_mag = 10.0, tau = 0.02;
  const double m = m_cart + m_pole;
  const double f = action == 1 ? f_mag : -f_mag;
  const double c = std::cos(s[2]), sn = std::sin(s[2]);
  const double temp = (f + m_pole * half_len * s[3] * s[3] * sn) / m;
  const double th_acc = (g * sn - c * temp) / (half_len * (4.0 / 3.0 - m_pole * c * c / m));
  const double x_acc = temp - m_pole * half_len * th_acc * c / m;
  return {s[0] + tau * s[1], s[1] + tau * x_acc, s[2] + tau * s[3], s[3] + tau * th_acc};
}

std::array<double, 4> obs4(const envs::CartPole& env) {
  return {env.obs()[0], env.obs()[1], env.obs()[2], env.obs()[3]};
}

TEST(EnvsCartPole, FirstStepFromRestIsTheHandWorkedFraction) {
  // From rest, push right (F = 10): sin 0 = 0, cos 0 = 1, total mass 1.1, pole mass * half length 0.05.
  //   temp      = 10 / 1.1                                = 100/11
  //   theta_acc = (0 - 100/11) / (0.5 (4/3 - 0.1/1.1))    = -(100/11) (66/41) = -600/41
  //   x_acc     = 100/11 - 0.05 (-600/41) / 1.1           = 100/11 + 300/451 = 400/41
  // Euler with tau 0.02: x and theta stay 0 (old velocities 0); x_dot = 8/41, theta_dot = -12/41.
  envs::CartPole env;
  env.set_state(0, 0, 0, 0);
  const envs::Step s = env.step(1);
  EXPECT_EQ(env.obs()[0], 0.0);
  EXPECT_DOUBLE_EQ(env.obs()[1], 8.0 / 41.0);
  EXPECT_EQ(env.obs()[2], 0.0);
  EXPECT_DOUBLE_EQ(env.obs()[3], -12.0 / 41.0);
  EXPECT_EQ(s.reward, 1.0);
  EXPECT_FALSE(s.terminated);
  EXPECT_FALSE(s.truncated);
  EXPECT_EQ(env.steps(), 1);

  // Pushing left mirrors it.
  env.set_state(0, 0, 0, 0);
  env.step(0);
  EXPECT_DOUBLE_EQ(env.obs()[1], -8.0 / 41.0);
  EXPECT_DOUBLE_EQ(env.obs()[3], 12.0 / 41.0);
}

TEST(EnvsCartPole, ThreeStepsFromATiltedStateFollowTheEquations) {
  envs::CartPole env;
  std::array<double, 4> ref = {0.01, -0.02, 0.03, -0.04};
  env.set_state(ref[0], ref[1], ref[2], ref[3]);
  // python3 (reference.py), actions 1, 0, 1 from (0.01, -0.02, 0.03, -0.04).
  const std::array<std::array<double, 4>, 3> pinned = {{
      {0.009600000000000001, 0.17467919574755525, 0.0292, -0.3230687179600081},
      {0.013093583914951107, -0.020846120233304483, 0.02273862564079984, -0.021322189539218106},
      {0.012676661510285018, 0.17394248021606085, 0.022312181850015475, -0.3067449777344227},
  }};
  const int actions[] = {1, 0, 1};
  for (int i = 0; i < 3; ++i) {
    env.step(actions[i]);
    ref = cartpole_reference(ref, actions[i]);
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(env.obs()[j], ref[j], 1e-15) << "step " << i + 1 << " component " << j;
      EXPECT_NEAR(env.obs()[j], pinned[i][j], 1e-15) << "step " << i + 1 << " component " << j;
    }
  }
}

// Each threshold: landing exactly on it is not a termination (Gymnasium compares strictly), the next
// double past it is. Velocities 0 keep x and theta where they are for one Euler step.
TEST(EnvsCartPole, TerminatesExactlyPastEachThresholdAndNotBefore) {
  const double x_limit = 2.4, theta_limit = 12 * 2 * pi / 360;  // Gymnasium's expression
  struct Case {
    double x, theta;
  };
  const Case on[] = {{x_limit, 0}, {-x_limit, 0}, {0, theta_limit}, {0, -theta_limit}};
  for (const Case& c : on) {
    envs::CartPole env;
    env.set_state(c.x, 0, c.theta, 0);
    const envs::Step s = env.step(1);
    EXPECT_EQ(env.obs()[0], c.x);
    EXPECT_EQ(env.obs()[2], c.theta);
    EXPECT_FALSE(s.terminated) << "x " << c.x << " theta " << c.theta;

    const double x = c.x == 0 ? 0 : std::nextafter(c.x, 2 * c.x);
    const double theta = c.theta == 0 ? 0 : std::nextafter(c.theta, 2 * c.theta);
    env.set_state(x, 0, theta, 0);
    const envs::Step past = env.step(1);
    EXPECT_TRUE(past.terminated) << "x " << x << " theta " << theta;
    EXPECT_EQ(past.reward, 1.0) << "the terminating step earns 1";
  }
}

TEST(EnvsCartPole, AlwaysPushingRightFallsAtStepNineWithReturnNine) {
  // python3 (reference.py): from rest, action 1 every step, theta passes -12 degrees at step 9.
  envs::CartPole env;
  env.set_state(0, 0, 0, 0);
  std::array<double, 4> ref = {0, 0, 0, 0};
  double ret = 0;
  envs::Step s;
  while (!s.terminated) {
    s = env.step(1);
    ref = cartpole_reference(ref, 1);
    ret += s.reward;
    ASSERT_LE(env.steps(), 9);
  }
  EXPECT_EQ(env.steps(), 9);
  EXPECT_EQ(ret, 9.0);
  EXPECT_LT(env.obs()[2], -12 * 2 * pi / 360);
  EXPECT_NEAR(env.obs()[2], ref[2], 1e-14);
  // Steps past the end earn 0, as in Gymnasium.
  EXPECT_EQ(env.step(1).reward, 0.0);
}

TEST(EnvsCartPole, TruncatesAtFiveHundredSteps) {
  // Pushing toward the lean (theta + 0.5 theta_dot) keeps the pole within 0.4 degrees for 500 steps
  // (python3, reference.py): the episode ends by the limit alone.
  envs::CartPole env;
  env.set_state(0, 0, 0, 0);
  double ret = 0;
  envs::Step s;
  for (int i = 1; i <= 500; ++i) {
    s = env.step(env.obs()[2] + 0.5 * env.obs()[3] > 0 ? 1 : 0);
    ret += s.reward;
    ASSERT_FALSE(s.terminated) << "step " << i;
    ASSERT_EQ(s.truncated, i == 500) << "step " << i;
  }
  EXPECT_EQ(env.steps(), 500);
  EXPECT_EQ(ret, 500.0);

  // A replay set 499 steps in truncates on its next step.
  env.set_state(0, 0, 0, 0, 499);
  EXPECT_TRUE(env.step(0).truncated);
}

TEST(EnvsCartPole, ASeedGivesOneStartAndOtherSeedsOthers) {
  envs::CartPole a, b;
  a.reset(42);
  b.reset(42);
  EXPECT_EQ(obs4(a), obs4(b));
  // python3 (reference.py): splitmix64(42), top 53 bits * 2^-53 into -0.05 + 0.1 u, four draws.
  const std::array<double, 4> pinned = {0.02415648787718233, -0.034008960712307995, -0.022139886974486135,
                                        -0.015580928347636247};
  EXPECT_EQ(obs4(a), pinned);
  EXPECT_EQ(a.steps(), 0);
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    b.reset(seed);
    if (seed != 42) {
      EXPECT_NE(obs4(a), obs4(b)) << "seed " << seed;
    }
    for (int j = 0; j < 4; ++j) {
      EXPECT_GE(b.obs()[j], -0.05);
      EXPECT_LT(b.obs()[j], 0.05);
    }
  }
}

TEST(EnvsCartPole, RefusesAnActionItDoesNotHave) {
  envs::CartPole env;
  env.set_state(0, 0, 0, 0);
  try {
    env.step(2);
    FAIL() << "step(2) did not throw";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "CartPole-v1: action 2 is neither 0 (push left) nor 1 (push right)");
  }
}

// ---- SplitMix64 -------------------------------------------------------------------------------

TEST(EnvsSplitMix64, MatchesTheReferenceSequence) {
  // The first outputs of Vigna's splitmix64.c from state 0.
  envs::SplitMix64 r(0);
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(r.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(r.next(), 0x06C45D188009454Full);
}

// ---- Acrobot ----------------------------------------------------------------------------------

using State = std::array<double, 4>;

// Sutton and Barto's ("book") acrobot written out again with Gymnasium's constants.
State acrobot_derivatives(const State& s, double a) {
  const double m1 = 1, m2 = 1, l1 = 1, lc1 = 0.5, lc2 = 0.5, i1 = 1, i2 = 1, g = 9.8;
  const double t1 = s[0], t2 = s[1], w1 = s[2], w2 = s[3];
  const double d1 = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * std::cos(t2)) + i1 + i2;
  const double d2 = m2 * (lc2 * lc2 + l1 * lc2 * std::cos(t2)) + i2;
  const double phi2 = m2 * lc2 * g * std::cos(t1 + t2 - pi / 2);
  const double phi1 = -m2 * l1 * lc2 * w2 * w2 * std::sin(t2) - 2 * m2 * l1 * lc2 * w2 * w1 * std::sin(t2) +
                      (m1 * lc1 + m2 * l1) * g * std::cos(t1 - pi / 2) + phi2;
  const double acc2 =
      (a + d2 / d1 * phi1 - m2 * l1 * lc2 * w1 * w1 * std::sin(t2) - phi2) / (m2 * lc2 * lc2 + i2 - d2 * d2 / d1);
  return {w1, w2, -(d2 * acc2 + phi1) / d1, acc2};
}

// One classic RK4 step of 0.2 s, with no wrapping or clipping.
State acrobot_rk4(const State& s, double a) {
  const double h = 0.2;
  auto at = [&](const State& k, double f) {
    State y;
    for (int i = 0; i < 4; ++i) y[i] = s[i] + f * k[i];
    return y;
  };
  const State k1 = acrobot_derivatives(s, a);
  const State k2 = acrobot_derivatives(at(k1, h / 2), a);
  const State k3 = acrobot_derivatives(at(k2, h / 2), a);
  const State k4 = acrobot_derivatives(at(k3, h), a);
  State y;
  for (int i = 0; i < 4; ++i) y[i] = s[i] + h / 6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
  return y;
}

double tip_height(double t1, double t2) { return -std::cos(t1) - std::cos(t1 + t2); }

TEST(EnvsAcrobot, OneRk4StepMatchesAnIndependentIntegration) {
  envs::Acrobot env;
  const State s0 = {0.1, -0.2, 0.3, -0.4};
  env.set_state(s0[0], s0[1], s0[2], s0[3]);
  const envs::Step s = env.step(2);  // torque +1
  const State ref = acrobot_rk4(s0, 1.0);
  // python3 (reference.py): Gymnasium's rk4 of _dsdt over [0, 0.2] from the same state, torque +1.
  const State pinned = {0.1282116312891261, -0.211840321026976, -0.023484731535001357, 0.28679521459777013};
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(env.state()[j], ref[j], 1e-14) << "component " << j;
    EXPECT_NEAR(env.state()[j], pinned[j], 1e-14) << "component " << j;
  }
  const double* o = env.obs();
  EXPECT_DOUBLE_EQ(o[0], std::cos(ref[0]));
  EXPECT_DOUBLE_EQ(o[1], std::sin(ref[0]));
  EXPECT_DOUBLE_EQ(o[2], std::cos(ref[1]));
  EXPECT_DOUBLE_EQ(o[3], std::sin(ref[1]));
  EXPECT_EQ(o[4], env.state()[2]);
  EXPECT_EQ(o[5], env.state()[3]);
  EXPECT_EQ(s.reward, -1.0);
  EXPECT_FALSE(s.terminated);
  EXPECT_EQ(env.steps(), 1);

  // The three actions are torques -1, 0, +1.
  for (int action = 0; action < 3; ++action) {
    env.set_state(s0[0], s0[1], s0[2], s0[3]);
    env.step(action);
    EXPECT_NEAR(env.state()[3], acrobot_rk4(s0, action - 1.0)[3], 1e-14) << "action " << action;
  }
}

TEST(EnvsAcrobot, TerminatesWhenTheTipPassesTheLineWithRewardZero) {
  // From rest with theta2 = 0 and no torque, the tip's height after one step crosses 1 between
  // these two adjacent doubles (bisection in python3, reference.py): exactly 1.0 from the first
  // (not past the line: the rule is strict), 1.0000000000000007 from the second.
  const double below = 2.1589893964169273, above = 2.1589893964169278;
  const State r_below = acrobot_rk4({below, 0, 0, 0}, 0), r_above = acrobot_rk4({above, 0, 0, 0}, 0);
  EXPECT_LE(tip_height(r_below[0], r_below[1]), 1.0);
  EXPECT_GT(tip_height(r_above[0], r_above[1]), 1.0);

  envs::Acrobot env;
  env.set_state(below, 0, 0, 0);
  envs::Step s = env.step(1);
  EXPECT_FALSE(s.terminated);
  EXPECT_EQ(s.reward, -1.0);

  env.set_state(above, 0, 0, 0);
  s = env.step(1);
  EXPECT_TRUE(s.terminated);
  EXPECT_EQ(s.reward, 0.0);

  // Far on either side: hanging down, and upright.
  env.set_state(0.5, 0, 0, 0);
  EXPECT_FALSE(env.step(1).terminated);
  env.set_state(pi, 0, 0, 0);
  s = env.step(1);
  EXPECT_TRUE(s.terminated);
  EXPECT_EQ(s.reward, 0.0);
}

TEST(EnvsAcrobot, ClipsVelocitiesAndWrapsAngles) {
  // From (0, 0, 20, -40) with no torque, RK4 alone gives dtheta1 50.0 and dtheta2 -115.2 (past 4 pi
  // and 9 pi) and angles 5.17 and -10.85 (python3, reference.py).
  const State s0 = {0, 0, 20, -40};
  const State ref = acrobot_rk4(s0, 0);
  ASSERT_GT(ref[2], 4 * pi);
  ASSERT_LT(ref[3], -9 * pi);
  ASSERT_GT(ref[0], pi);
  ASSERT_LT(ref[1], -3 * pi);  // two whole turns to wrap

  envs::Acrobot env;
  env.set_state(s0[0], s0[1], s0[2], s0[3]);
  env.step(1);
  EXPECT_EQ(env.state()[2], 4 * pi);
  EXPECT_EQ(env.state()[3], -9 * pi);
  EXPECT_NEAR(env.state()[0], ref[0] - 2 * pi, 1e-13);
  EXPECT_NEAR(env.state()[1], ref[1] + 4 * pi, 1e-13);
  EXPECT_NEAR(env.state()[0], -1.1107822510384695, 1e-13);  // python3, reference.py
  EXPECT_NEAR(env.state()[1], 1.7194039945148774, 1e-13);

  // And the mirror image: the other side of each limit.
  env.set_state(0, 0, -20, 40);
  env.step(1);
  EXPECT_EQ(env.state()[2], -4 * pi);
  EXPECT_EQ(env.state()[3], 9 * pi);
}

TEST(EnvsAcrobot, TruncatesAtFiveHundredSteps) {
  // Hanging at rest with no torque it barely moves: the limit alone ends the episode, return -500.
  envs::Acrobot env;
  env.set_state(0, 0, 0, 0);
  double ret = 0;
  for (int i = 1; i <= 500; ++i) {
    const envs::Step s = env.step(1);
    ret += s.reward;
    ASSERT_FALSE(s.terminated) << "step " << i;
    ASSERT_EQ(s.truncated, i == 500) << "step " << i;
  }
  EXPECT_EQ(ret, -500.0);
  EXPECT_EQ(env.steps(), 500);
}

TEST(EnvsAcrobot, ASeedGivesOneStartAndOtherSeedsOthers) {
  envs::Acrobot a, b;
  a.reset(7);
  b.reset(7);
  EXPECT_EQ(a.state(), b.state());
  // python3 (reference.py): splitmix64(7), four draws into -0.1 + 0.2 u.
  const State pinned = {-0.0220340503217457, -0.09664234109436878, 0.0801521361213767, 0.016586058605615614};
  EXPECT_EQ(a.state(), pinned);
  EXPECT_EQ(a.obs()[0], std::cos(pinned[0]));
  EXPECT_EQ(a.obs()[5], pinned[3]);
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    b.reset(seed);
    if (seed != 7) {
      EXPECT_NE(a.state(), b.state()) << "seed " << seed;
    }
    for (double v : b.state()) {
      EXPECT_GE(v, -0.1);
      EXPECT_LT(v, 0.1);
    }
  }
}

TEST(EnvsAcrobot, RefusesAnActionItDoesNotHave) {
  envs::Acrobot env;
  try {
    env.step(3);
    FAIL() << "step(3) did not throw";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "Acrobot-v1: action 3 is not 0, 1 or 2 (torque -1, 0, +1)");
  }
}

}  // namespace
