// CartPole-v1 and Acrobot-v1 through fibra::rl give exactly what jobs/envs/envs.hpp gives for the
// same seed and actions (the adapters add spaces and spans, never dynamics).
#include <fibra/rl/env.hpp>

#include "envs.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace {

template <class Inner>
void expect_same_episodes(const char* name, int num_actions) {
  for (std::uint64_t seed : {0ull, 1ull, 42ull, 123456789ull}) {
    auto env = fibra::rl::make_env(name);
    Inner inner;
    const std::span<const double> first = env->reset(seed);
    inner.reset(seed);
    ASSERT_EQ(std::vector<double>(first.begin(), first.end()),
              std::vector<double>(inner.obs(), inner.obs() + Inner::obs_size));
    envs::SplitMix64 actions(seed + 1000);
    for (int t = 0; t < 600; ++t) {
      const int a = static_cast<int>(actions.next() % static_cast<std::uint64_t>(num_actions));
      const double action[] = {static_cast<double>(a)};
      const fibra::rl::StepResult r = env->step(action);
      const envs::Step s = inner.step(a);
      ASSERT_EQ(std::vector<double>(r.observation.begin(), r.observation.end()),
                std::vector<double>(inner.obs(), inner.obs() + Inner::obs_size))
          << name << " seed " << seed << " step " << t;
      ASSERT_EQ(r.reward, s.reward);
      ASSERT_EQ(r.terminated, s.terminated);
      ASSERT_EQ(r.truncated, s.truncated);
      if (s.terminated || s.truncated) break;
    }
  }
}

TEST(Classic, CartPoleIsEnvsCartPole) {
  expect_same_episodes<envs::CartPole>("CartPole-v1", 2);
  auto env = fibra::rl::make_env("CartPole-v1");
  EXPECT_EQ(std::get<fibra::rl::Discrete>(env->action_space()).n, 2);
  EXPECT_EQ(env->observation_space().shape, (std::vector<std::size_t>{4}));
  EXPECT_EQ(env->observation_space().high[0], 4.8);
}

TEST(Classic, AcrobotIsEnvsAcrobot) {
  expect_same_episodes<envs::Acrobot>("Acrobot-v1", 3);
  auto env = fibra::rl::make_env("Acrobot-v1");
  EXPECT_EQ(std::get<fibra::rl::Discrete>(env->action_space()).n, 3);
  EXPECT_EQ(env->observation_space().shape, (std::vector<std::size_t>{6}));
}

TEST(Classic, DiscreteActionsAreWholeIndices) {
  auto env = fibra::rl::make_env("Acrobot-v1");
  env->reset(0);
  const double three[] = {3}, half[] = {0.5}, negative[] = {-1}, two_values[] = {0, 1};
  EXPECT_THROW(env->step(three), std::out_of_range);
  EXPECT_THROW(env->step(half), std::out_of_range);
  EXPECT_THROW(env->step(negative), std::out_of_range);
  EXPECT_THROW(env->step(two_values), std::invalid_argument);
  try {
    env->step(half);
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "Acrobot-v1: action 0.500000 is not one of 0, ..., 2");
  }
}

}  // namespace
