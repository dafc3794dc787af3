// A user's torch network (PolicySpec::torch_module, tests/user_policy/shared_torso.cpp: one torso
// under both heads) in place of the built-in MLPs: its parameters named as named_parameters()
// names them, initial weights as torch's own initialisation draws them, the workers' inference
// against the learner's evaluation, the loss's gradient against finite differences, PPO solving
// CartPole-v1 with it, and the errors for a library that cannot serve.
#include "learner_checks.hpp"

#include <fibra/rl/ppo.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using fibra::rl::PolicySpec;
using fibra::rl::PpoConfig;

PolicySpec torso_spec(const std::string& env, std::vector<int> hidden) {
  PolicySpec spec = PolicySpec::for_env(env, std::move(hidden));
  spec.torch_module = FIBRA_RL_TEST_POLICY;
  return spec;
}

// The library's path with its file name replaced.
std::string beside_test_policy(const std::string& file) {
  const std::string path = FIBRA_RL_TEST_POLICY;
  return path.substr(0, path.rfind('/') + 1) + file;
}

TEST(UserPolicy, ItsParametersAreNamedAsTheModuleNamesThem) {
  const std::vector<fibra::rl::ParameterBlock> blocks = fibra::rl::parameter_layout(torso_spec("CartPole-v1", {16}));
  // The module's registration order (shared_torso.cpp): torso (Linear 4->16, Tanh, Linear 16->16,
  // Tanh), actor (16->2), critic (16->1).
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected{
      {"torso.0.weight", {16, 4}}, {"torso.0.bias", {16}}, {"torso.2.weight", {16, 16}}, {"torso.2.bias", {16}},
      {"actor.weight", {2, 16}},   {"actor.bias", {2}},    {"critic.weight", {1, 16}},   {"critic.bias", {1}}};
  ASSERT_EQ(blocks.size(), expected.size());
  std::size_t offset = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].name, expected[i].first);
    EXPECT_EQ(blocks[i].shape, expected[i].second) << blocks[i].name;
    EXPECT_EQ(blocks[i].offset, offset) << blocks[i].name;
    offset += blocks[i].size;
  }
  EXPECT_EQ(offset, 64u + 16 + 256 + 16 + 32 + 2 + 16 + 1);
  EXPECT_EQ(fibra::rl::parameter_count(torso_spec("CartPole-v1", {16})), offset);

  // A Box: the Gaussian's log standard deviation is fibra's, after the module's parameters.
  const std::vector<fibra::rl::ParameterBlock> pendulum = fibra::rl::parameter_layout(torso_spec("Pendulum-v1", {8}));
  EXPECT_EQ(pendulum.back().name, "actor_logstd");
  EXPECT_EQ(pendulum.back().shape, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(pendulum[pendulum.size() - 3].name, "critic.weight");
}

TEST(UserPolicy, InitialWeightsAreTorchsInitialisationSeeded) {
  const PolicySpec spec = torso_spec("CartPole-v1", {16});
  const fibra::rl::PolicyWeights a = fibra::rl::initial_weights(spec, 1), b = fibra::rl::initial_weights(spec, 2);
  ASSERT_EQ(a.params.size(), fibra::rl::parameter_count(spec));
  EXPECT_NE(a.params, b.params) << "the seed does not reach the network's initialisation";
  // torch.nn.Linear draws weight and bias uniform in +-1/sqrt(in): the first layer's in is 4.
  const std::vector<fibra::rl::ParameterBlock> blocks = fibra::rl::parameter_layout(spec);
  float largest = 0;
  for (std::size_t i = 0; i < blocks[0].size + blocks[1].size; ++i) largest = std::max(largest, std::abs(a.params[i]));
  EXPECT_LE(largest, 0.5f);
  EXPECT_GT(largest, 0.4f) << "64 + 16 draws from U(-0.5, 0.5) should come near the bound";
  // The learner starts from the same weights.
  PpoConfig config;
  config.seed = 2;
  fibra::rl::PpoLearner learner(spec, config);
  const std::vector<double> p = learner.parameters();
  EXPECT_EQ(std::vector<float>(p.begin(), p.end()), b.params);
}

TEST(UserPolicy, WorkersInferenceAgreesWithTheLearner) {
  fibra::rl::test::expect_policy_equals_learner("CartPole-v1", PpoConfig{}, torso_spec("CartPole-v1", {32}));
  fibra::rl::test::expect_policy_equals_learner("Pendulum-v1", PpoConfig{}, torso_spec("Pendulum-v1", {32}));
}

TEST(UserPolicy, CategoricalGradientMatchesFiniteDifferences) {
  fibra::rl::test::expect_gradient_matches_finite_differences("CartPole-v1", torso_spec("CartPole-v1", {5}));
}
TEST(UserPolicy, GaussianGradientMatchesFiniteDifferences) {
  fibra::rl::test::expect_gradient_matches_finite_differences("Pendulum-v1", torso_spec("Pendulum-v1", {5}));
}

TEST(UserPolicy, PpoSolvesCartPoleWithIt) {
  PpoConfig config;
  fibra::rl::LocalTrainOptions options;
  options.torch_module = FIBRA_RL_TEST_POLICY;
  options.eval_every_steps = 5'120;
  options.stop_at_return = 475;
  const fibra::rl::LocalTrainResult r = fibra::rl::train_ppo_local("CartPole-v1", config, options);
  std::printf(
      "a user's network (shared torso of 64): %lld steps, %.2f s (sampling %.2f s, learning %.2f s, "
      "evaluating %.2f s); mean return %.1f +- %.1f\n",
      static_cast<long long>(r.steps), r.seconds, r.sample_seconds, r.learn_seconds, r.eval_seconds, r.evaluation.mean,
      r.evaluation.std);
  EXPECT_TRUE(r.solved_at.has_value()) << "not solved within " << config.total_steps << " steps";
  EXPECT_GE(r.evaluation.mean, 475.0);
}

void expect_refused(const std::string& path, const std::vector<std::string>& says) {
  PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  spec.torch_module = path;
  try {
    fibra::rl::parameter_layout(spec);
    FAIL() << path << ": no error";
  } catch (const fibra::ConfigError& e) {
    for (const std::string& s : says)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << "'" << s << "' not in: " << e.what();
  }
}

TEST(UserPolicy, ALibraryThatCannotServeIsRefusedWithTheReason) {
  expect_refused("libshared_torso.so", {"must be an absolute path", "'libshared_torso.so'"});
  expect_refused(beside_test_policy("no_such_policy.so"),
                 {"cannot open the policy network's library", beside_test_policy("no_such_policy.so"), "To fix"});
  expect_refused(FIBRA_RL_TEST_WRONG_POLICY,
                 {FIBRA_RL_TEST_WRONG_POLICY, "gave values of shape [2, 2] for 2 rows", "fibra needs [2] or [2, 1]"});
}

}  // namespace
