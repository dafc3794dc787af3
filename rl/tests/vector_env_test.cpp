// VectorEnv: same-step autoreset, the final observation kept, and per-copy seeds derived from one.
#include <fibra/rl/vector_env.hpp>

#include "envs.hpp"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <stdexcept>
#include <vector>

namespace {

// Observation: (steps since reset, the reset's seed >> 11, exact in a double). Action 1 terminates
// the episode at once, action 0 goes on; truncated at 3 steps.
class Tagged : public fibra::rl::Env {
 public:
  fibra::rl::Box observation_space() const override { return {.shape = {2}, .low = {0, 0}, .high = {3, 0x1p53}}; }
  fibra::rl::Space action_space() const override { return fibra::rl::Discrete{2}; }
  std::span<const double> reset(std::uint64_t seed) override {
    obs_ = {0, static_cast<double>(seed >> 11)};
    return obs_;
  }
  fibra::rl::StepResult step(std::span<const double> action) override {
    obs_[0] += 1;
    return {.observation = obs_, .reward = obs_[0], .terminated = action[0] == 1, .truncated = obs_[0] >= 3};
  }

 private:
  std::array<double, 2> obs_{};
};

fibra::rl::VectorEnv tagged(int n) {
  std::vector<std::unique_ptr<fibra::rl::Env>> envs;
  for (int i = 0; i < n; ++i) envs.push_back(std::make_unique<Tagged>());
  return fibra::rl::VectorEnv(std::move(envs));
}

double tag(std::uint64_t seed) { return static_cast<double>(seed >> 11); }

TEST(VectorEnv, SameStepAutoresetOnTermination) {
  fibra::rl::VectorEnv envs = tagged(3);
  envs.reset(5);
  const std::vector<std::uint64_t> first(envs.episode_seeds().begin(), envs.episode_seeds().end());

  const std::vector<double> actions = {0, 1, 0};
  const fibra::rl::VectorStep& s = envs.step(actions);
  EXPECT_EQ(std::vector<std::uint8_t>(s.terminated.begin(), s.terminated.end()), (std::vector<std::uint8_t>{0, 1, 0}));
  EXPECT_EQ(std::vector<std::uint8_t>(s.truncated.begin(), s.truncated.end()), (std::vector<std::uint8_t>{0, 0, 0}));
  EXPECT_EQ(std::vector<double>(s.rewards.begin(), s.rewards.end()), (std::vector<double>{1, 1, 1}));
  // Copy 1 ended: its row is the new episode's first observation, the old one's last is kept.
  EXPECT_NE(envs.episode_seeds()[1], first[1]);
  EXPECT_EQ(s.observations[2], 0);
  EXPECT_EQ(s.observations[3], tag(envs.episode_seeds()[1]));
  EXPECT_EQ(s.final_observations[2], 1);
  EXPECT_EQ(s.final_observations[3], tag(first[1]));
  // The others go on in their episodes.
  EXPECT_EQ(envs.episode_seeds()[0], first[0]);
  EXPECT_EQ(envs.episode_seeds()[2], first[2]);
  EXPECT_EQ(s.observations[0], 1);
  EXPECT_EQ(s.observations[1], tag(first[0]));
  EXPECT_EQ(s.observations[4], 1);
}

TEST(VectorEnv, SameStepAutoresetOnTruncation) {
  fibra::rl::VectorEnv envs = tagged(2);
  envs.reset(9);
  const std::uint64_t first = envs.episode_seeds()[0];
  const std::vector<double> actions = {0, 0};
  envs.step(actions);
  envs.step(actions);
  const fibra::rl::VectorStep& s = envs.step(actions);  // the third step truncates both
  EXPECT_EQ(s.truncated[0], 1);
  EXPECT_EQ(s.truncated[1], 1);
  EXPECT_EQ(s.final_observations[0], 3);
  EXPECT_EQ(s.final_observations[1], tag(first));
  EXPECT_EQ(s.observations[0], 0);
  EXPECT_EQ(s.observations[1], tag(envs.episode_seeds()[0]));
  EXPECT_EQ(envs.step(actions).observations[0], 1);  // the new episode goes on
}

// The documented derivation: copy i's seed s_i is the i-th draw of SplitMix64(seed); its episode k
// starts from SplitMix64(s_i + k).next().
TEST(VectorEnv, SeedsAreDistinctAndReproducible) {
  fibra::rl::VectorEnv a("Pendulum-v1", 8), b("Pendulum-v1", 8), c("Pendulum-v1", 8);
  const std::span<const double> obs_a = a.reset(7);
  const std::vector<double> first_a(obs_a.begin(), obs_a.end());
  const std::span<const double> obs_b = b.reset(7);
  EXPECT_EQ(first_a, std::vector<double>(obs_b.begin(), obs_b.end()));
  c.reset(8);
  EXPECT_NE(std::vector<std::uint64_t>(a.episode_seeds().begin(), a.episode_seeds().end()),
            std::vector<std::uint64_t>(c.episode_seeds().begin(), c.episode_seeds().end()));

  envs::SplitMix64 master(7);
  std::vector<std::uint64_t> copy_seeds;
  std::set<std::uint64_t> distinct;
  for (int i = 0; i < 8; ++i) {
    copy_seeds.push_back(master.next());
    const std::uint64_t seed = envs::SplitMix64(copy_seeds[i]).next();
    EXPECT_EQ(a.episode_seeds()[i], seed) << "copy " << i;
    EXPECT_EQ(b.episode_seeds()[i], seed) << "copy " << i;
    distinct.insert(seed);
    // Row i is what a lone Pendulum-v1 reset with that seed gives.
    auto lone = fibra::rl::make_env("Pendulum-v1");
    const std::span<const double> o = lone->reset(seed);
    EXPECT_EQ(std::vector<double>(o.begin(), o.end()),
              std::vector<double>(first_a.begin() + 3 * i, first_a.begin() + 3 * i + 3));
  }
  EXPECT_EQ(distinct.size(), 8u);

  // 200 steps truncate every copy; each starts its episode 1, seeded SplitMix64(s_i + 1).next().
  const std::vector<double> torques(8, 0.5);
  for (int t = 0; t < 200; ++t) {
    const fibra::rl::VectorStep& sa = a.step(torques);
    const fibra::rl::VectorStep& sb = b.step(torques);
    ASSERT_EQ(std::vector<double>(sa.observations.begin(), sa.observations.end()),
              std::vector<double>(sb.observations.begin(), sb.observations.end()));
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(a.episode_seeds()[i], envs::SplitMix64(copy_seeds[i] + 1).next()) << "copy " << i;
    distinct.insert(a.episode_seeds()[i]);
  }
  EXPECT_EQ(distinct.size(), 16u);
}

TEST(VectorEnv, Errors) {
  fibra::rl::VectorEnv envs("CartPole-v1", 2);
  EXPECT_EQ(envs.obs_size(), 4u);
  EXPECT_EQ(envs.action_size(), 1u);
  const std::vector<double> two = {0, 1}, three = {0, 1, 0};
  EXPECT_THROW(envs.step(two), std::logic_error);  // before reset
  envs.reset(0);
  EXPECT_THROW(envs.step(three), std::invalid_argument);
  try {
    fibra::rl::VectorEnv none("CartPole-v1", 0);
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(), "fibra::rl: VectorEnv(\"CartPole-v1\", 0): the number of copies must be at least 1");
  }
  std::vector<std::unique_ptr<fibra::rl::Env>> mixed;
  mixed.push_back(fibra::rl::make_env("CartPole-v1"));
  mixed.push_back(fibra::rl::make_env("Acrobot-v1"));
  try {
    fibra::rl::VectorEnv bad(std::move(mixed));
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::rl: VectorEnv's environment 1 has other spaces than environment 0; give copies of one "
                 "environment");
  }
}

}  // namespace
