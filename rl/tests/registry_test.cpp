// The registry of environments: the built-ins, FIBRA_ENV, and the errors a user reads.
#include <fibra/rl/env.hpp>

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace {

// A user environment: one value, the step count; terminates after three steps.
class Corridor : public fibra::rl::Env {
 public:
  fibra::rl::Box observation_space() const override { return {.shape = {1}, .low = {0}, .high = {3}}; }
  fibra::rl::Space action_space() const override { return fibra::rl::Discrete{1}; }
  std::span<const double> reset(std::uint64_t) override {
    obs_[0] = 0;
    return obs_;
  }
  fibra::rl::StepResult step(std::span<const double>) override {
    obs_[0] += 1;
    return {.observation = obs_, .reward = 1, .terminated = obs_[0] >= 3, .truncated = false};
  }

 private:
  std::array<double, 1> obs_{0};
};

}  // namespace

FIBRA_ENV("Corridor-v0", Corridor);

namespace {

TEST(Registry, KnowsTheBuiltInsAndUserEnvironments) {
  EXPECT_EQ(fibra::rl::env_names(),
            (std::vector<std::string>{"Acrobot-v1", "CartPole-v1", "Corridor-v0", "Pendulum-v1"}));
  for (const std::string& name : fibra::rl::env_names()) EXPECT_NE(fibra::rl::make_env(name), nullptr) << name;

  EXPECT_TRUE(std::holds_alternative<fibra::rl::Discrete>(fibra::rl::make_env("CartPole-v1")->action_space()));
  EXPECT_TRUE(std::holds_alternative<fibra::rl::Box>(fibra::rl::make_env("Pendulum-v1")->action_space()));

  auto corridor = fibra::rl::make_env("Corridor-v0");
  corridor->reset(0);
  const double action[] = {0};
  corridor->step(action);
  corridor->step(action);
  EXPECT_TRUE(corridor->step(action).terminated);
}

TEST(Registry, MakeGivesAFreshEnvironmentEachCall) {
  auto a = fibra::rl::make_env("Corridor-v0"), b = fibra::rl::make_env("Corridor-v0");
  EXPECT_NE(a.get(), b.get());
}

TEST(Registry, UnknownNameListsTheKnownOnes) {
  try {
    fibra::rl::make_env("Cartpole-v1");
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::rl: no environment named 'Cartpole-v1'; known: Acrobot-v1, CartPole-v1, Corridor-v0, "
                 "Pendulum-v1 (register one with FIBRA_ENV)");
  }
}

TEST(Registry, NamesAreRegisteredOnce) {
  try {
    fibra::rl::register_env("Pendulum-v1", [] { return fibra::rl::make_env("Corridor-v0"); });
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::rl: an environment named 'Pendulum-v1' is already registered; give FIBRA_ENV another name");
  }
  EXPECT_THROW(fibra::rl::register_env("", [] { return fibra::rl::make_env("Corridor-v0"); }), fibra::ConfigError);
}

}  // namespace
