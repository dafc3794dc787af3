// PPO solves CartPole-v1 in one process: a mean return of at least 475 over 100 greedy evaluation
// episodes within 100,000 environment steps, with PpoConfig's defaults.
#include <fibra/rl/ppo.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace {

TEST(PpoSolves, CartPoleWithinOneHundredThousandSteps) {
  fibra::rl::PpoConfig config;  // rl-baselines3-zoo's CartPole-v1 settings
  if (const char* seed = std::getenv("FIBRA_RL_TEST_SEED")) config.seed = std::strtoull(seed, nullptr, 10);
  fibra::rl::LocalTrainOptions options;
  options.eval_every_steps = 5'120;  // every 20 updates of 8 x 32 steps
  options.stop_at_return = 475;
  const fibra::rl::LocalTrainResult r = fibra::rl::train_ppo_local("CartPole-v1", config, options);
  std::printf(
      "seed %llu: %lld steps, %d updates, %.2f s (sampling %.2f s, learning %.2f s, %.2f ms a learn(); "
      "evaluating %.2f s); mean return %.1f +- %.1f over %zu greedy episodes\n",
      static_cast<unsigned long long>(config.seed), static_cast<long long>(r.steps), r.updates, r.seconds,
      r.sample_seconds, r.learn_seconds, 1e3 * r.learn_seconds / r.updates, r.eval_seconds, r.evaluation.mean,
      r.evaluation.std, r.evaluation.returns.size());
  EXPECT_TRUE(r.solved_at.has_value()) << "not solved within " << config.total_steps << " steps";
  EXPECT_GE(r.evaluation.mean, 475.0);
  EXPECT_LE(r.steps, 100'000);
}

}  // namespace
