// GAE(lambda) and V-trace against values worked by hand, with a termination and a truncation.
#include <fibra/rl/gae.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using fibra::rl::Trajectory;

// gamma = 0.5 and lambda = 0.5 keep the arithmetic exact in binary.
constexpr double gamma_ = 0.5, lambda_ = 0.5;

TEST(Gae, OneCopyNoEpisodeEndMatchesHand) {
  // rewards 1, 2, 3; V(x_0..2) = 0.5, 1, 1.5; V(x_3) = 2.
  const std::vector<float> rewards{1, 2, 3}, values{0.5, 1, 1.5}, bootstrap{0, 0, 0}, last{2};
  const std::vector<std::uint8_t> dones{0, 0, 0};
  const Trajectory tr{.steps = 3,
                      .num_envs = 1,
                      .rewards = rewards,
                      .values = values,
                      .dones = dones,
                      .bootstrap = bootstrap,
                      .last_values = last};
  std::vector<float> adv(3), ret(3);
  fibra::rl::gae(tr, gamma_, lambda_, adv, ret);
  // t=2: delta = 3 + 0.5*2   - 1.5 = 2.5;  A = 2.5
  // t=1: delta = 2 + 0.5*1.5 - 1   = 1.75; A = 1.75 + 0.25*2.5   = 2.375
  // t=0: delta = 1 + 0.5*1   - 0.5 = 1;    A = 1    + 0.25*2.375 = 1.59375
  EXPECT_FLOAT_EQ(adv[2], 2.5f);
  EXPECT_FLOAT_EQ(adv[1], 2.375f);
  EXPECT_FLOAT_EQ(adv[0], 1.59375f);
  // returns = A + V
  EXPECT_FLOAT_EQ(ret[0], 2.09375f);
  EXPECT_FLOAT_EQ(ret[1], 3.375f);
  EXPECT_FLOAT_EQ(ret[2], 4.0f);
}

TEST(Gae, TerminationAndTruncationCutTheRecursion) {
  // Two copies, step-major (element t*2 + i).
  // copy 0: terminated at t=1.  rewards 1, 1, 1; V 1, 2, 3; V(x_3) = 4.
  // copy 1: truncated at t=0 with V(final obs) = 6.  rewards 2, 1, 1; V 1, 1, 2; V(x_3) = 2.
  const std::vector<float> rewards{1, 2, 1, 1, 1, 1}, values{1, 1, 2, 1, 3, 2}, bootstrap{0, 6, 0, 0, 0, 0}, last{4, 2};
  const std::vector<std::uint8_t> dones{0, 1, 1, 0, 0, 0};
  const Trajectory tr{.steps = 3,
                      .num_envs = 2,
                      .rewards = rewards,
                      .values = values,
                      .dones = dones,
                      .bootstrap = bootstrap,
                      .last_values = last};
  std::vector<float> adv(6), ret(6);
  fibra::rl::gae(tr, gamma_, lambda_, adv, ret);
  // copy 0: t=2: delta = 1 + 0.5*4 - 3 = 0;               A = 0
  //         t=1 (terminated): delta = 1 + 0.5*0 - 2 = -1; A = -1 (nothing from t=2)
  //         t=0: delta = 1 + 0.5*2 - 1 = 1;               A = 1 + 0.25*(-1) = 0.75
  EXPECT_FLOAT_EQ(adv[4], 0.0f);
  EXPECT_FLOAT_EQ(adv[2], -1.0f);
  EXPECT_FLOAT_EQ(adv[0], 0.75f);
  // copy 1: t=2: delta = 1 + 0.5*2 - 2 = 0;               A = 0
  //         t=1: delta = 1 + 0.5*2 - 1 = 1;               A = 1 + 0.25*0 = 1
  //         t=0 (truncated): delta = 2 + 0.5*6 - 1 = 4;   A = 4 (the bootstrap, not V(x_1); nothing from t=1)
  EXPECT_FLOAT_EQ(adv[5], 0.0f);
  EXPECT_FLOAT_EQ(adv[3], 1.0f);
  EXPECT_FLOAT_EQ(adv[1], 4.0f);
  EXPECT_FLOAT_EQ(ret[1], 5.0f);  // A + V = 4 + 1
  EXPECT_FLOAT_EQ(ret[2], 1.0f);  // -1 + 2
}

TEST(Gae, FragmentsConcatenateInOrder) {
  fibra::rl::Fragment f;
  f.num_envs = 1, f.steps = 3;
  f.rewards = {1, 2, 3}, f.values = {0.5, 1, 1.5}, f.bootstrap = {0, 0, 0}, f.last_values = {2}, f.dones = {0, 0, 0};
  const std::vector<fibra::rl::Fragment> both{f, f};
  const fibra::rl::GaeResult r = fibra::rl::gae(std::span<const fibra::rl::Fragment>(both), gamma_, lambda_);
  ASSERT_EQ(r.advantages.size(), 6u);
  EXPECT_FLOAT_EQ(r.advantages[3], 1.59375f);
  EXPECT_FLOAT_EQ(r.returns[5], 4.0f);
}

TEST(Gae, WrongSizesAreRefused) {
  const std::vector<float> two{1, 2}, last{0};
  const std::vector<std::uint8_t> dones{0, 0};
  const Trajectory tr{
      .steps = 3, .num_envs = 1, .rewards = two, .values = two, .dones = dones, .bootstrap = two, .last_values = last};
  std::vector<float> adv(3), ret(3);
  EXPECT_THROW(fibra::rl::gae(tr, 0.9, 0.9, adv, ret), std::invalid_argument);
}

TEST(Vtrace, ClippedRatiosMatchHand) {
  // One copy, no episode end; gamma 0.5, rho_bar = c_bar = 1.
  // pi/mu = 0.5, 2, 1: rho = 0.5, 1, 1 (2 clipped); c = 0.5, 1, 1.
  // rewards 1, 2, 3; V 0.5, 1, 1.5; V(x_3) = 2.
  const std::vector<float> rewards{1, 2, 3}, values{0.5, 1, 1.5}, bootstrap{0, 0, 0}, last{2};
  const std::vector<std::uint8_t> dones{0, 0, 0};
  const std::vector<float> behaviour{-1, -1, -1};
  const std::vector<float> target{static_cast<float>(-1 + std::log(0.5)), static_cast<float>(-1 + std::log(2.0)), -1};
  const Trajectory tr{.steps = 3,
                      .num_envs = 1,
                      .rewards = rewards,
                      .values = values,
                      .dones = dones,
                      .bootstrap = bootstrap,
                      .last_values = last};
  const fibra::rl::VtraceResult r = fibra::rl::vtrace(tr, behaviour, target, {.gamma = 0.5});
  // t=2: delta = 1*(3 + 0.5*2 - 1.5) = 2.5;          v - V = 2.5;                   vs = 4
  // t=1: delta = 1*(2 + 0.5*1.5 - 1) = 1.75;         v - V = 1.75 + 0.5*1*2.5 = 3;   vs = 4
  // t=0: delta = 0.5*(1 + 0.5*1 - 0.5) = 0.5;        v - V = 0.5 + 0.5*0.5*3 = 1.25; vs = 1.75
  EXPECT_NEAR(r.vs[2], 4.0, 1e-5);
  EXPECT_NEAR(r.vs[1], 4.0, 1e-5);
  EXPECT_NEAR(r.vs[0], 1.75, 1e-5);
  // pg advantages: rho_t (r_t + gamma v_{t+1} - V(x_t)), v_3 = V(x_3):
  // t=0: 0.5*(1 + 0.5*4 - 0.5) = 1.25;  t=1: 1*(2 + 0.5*4 - 1) = 3;  t=2: 1*(3 + 0.5*2 - 1.5) = 2.5
  EXPECT_NEAR(r.pg_advantages[0], 1.25, 1e-5);
  EXPECT_NEAR(r.pg_advantages[1], 3.0, 1e-5);
  EXPECT_NEAR(r.pg_advantages[2], 2.5, 1e-5);
}

TEST(Vtrace, TerminationAndTruncation) {
  // One copy, on-policy (pi = mu), terminated at t=0, truncated at t=1 with V(final obs) = 4.
  // rewards 1, 1, 1; V 2, 2, 2; V(x_3) = 2; gamma 0.5.
  const std::vector<float> rewards{1, 1, 1}, values{2, 2, 2}, bootstrap{0, 4, 0}, last{2}, logp{-0.7f, -0.7f, -0.7f};
  const std::vector<std::uint8_t> dones{1, 1, 0};
  const Trajectory tr{.steps = 3,
                      .num_envs = 1,
                      .rewards = rewards,
                      .values = values,
                      .dones = dones,
                      .bootstrap = bootstrap,
                      .last_values = last};
  const fibra::rl::VtraceResult r = fibra::rl::vtrace(tr, logp, logp, {.gamma = 0.5});
  // t=2: delta = 1 + 0.5*2 - 2 = 0;  vs = 2
  // t=1 (truncated): delta = 1 + 0.5*4 - 2 = 1; nothing from t=2; vs = 3
  // t=0 (terminated): delta = 1 + 0.5*0 - 2 = -1; vs = 1
  EXPECT_FLOAT_EQ(r.vs[2], 2.0f);
  EXPECT_FLOAT_EQ(r.vs[1], 3.0f);
  EXPECT_FLOAT_EQ(r.vs[0], 1.0f);
  // pg: t=0: 1 + 0.5*0 - 2 = -1;  t=1: 1 + 0.5*4 - 2 = 1;  t=2: 1 + 0.5*2 - 2 = 0
  EXPECT_FLOAT_EQ(r.pg_advantages[0], -1.0f);
  EXPECT_FLOAT_EQ(r.pg_advantages[1], 1.0f);
  EXPECT_FLOAT_EQ(r.pg_advantages[2], 0.0f);
}

TEST(Vtrace, OnPolicyWithLambdaOneIsTheNStepReturn) {
  // With pi = mu and no clipping, v_s is the discounted return bootstrapped by V(x_T): at t=0,
  // 1 + 0.5*2 + 0.25*3 + 0.125*2 = 3.
  const std::vector<float> rewards{1, 2, 3}, values{0.5, 1, 1.5}, bootstrap{0, 0, 0}, last{2}, logp{-1, -2, -3};
  const std::vector<std::uint8_t> dones{0, 0, 0};
  const Trajectory tr{.steps = 3,
                      .num_envs = 1,
                      .rewards = rewards,
                      .values = values,
                      .dones = dones,
                      .bootstrap = bootstrap,
                      .last_values = last};
  const fibra::rl::VtraceResult r = fibra::rl::vtrace(tr, logp, logp, {.gamma = 0.5});
  EXPECT_FLOAT_EQ(r.vs[0], 3.0f);
}

}  // namespace
