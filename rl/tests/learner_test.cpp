// PpoLearner through the libtorch module: libtorch loaded only once a learner is made; Policy's
// inference equal to the learner's own evaluation; the loss's gradient against central finite
// differences in double; state() and load_state(); the same learning for any split of the copies.
#include "learner_checks.hpp"

#include <fibra/rl/ppo.hpp>

#include <gtest/gtest.h>

#include <link.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using fibra::rl::Fragment;
using fibra::rl::PolicySpec;
using fibra::rl::PpoConfig;
using fibra::rl::PpoLearner;
using fibra::rl::Sampler;
using fibra::rl::test::expect_close;
using fibra::rl::test::expect_gradient_matches_finite_differences;
using fibra::rl::test::expect_policy_equals_learner;
using fibra::rl::test::random_parameters;

bool libtorch_loaded() {
  bool found = false;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        if (info->dlpi_name && std::string(info->dlpi_name).find("libtorch_cpu") != std::string::npos)
          *static_cast<bool*>(data) = true;
        return 0;
      },
      &found);
  return found;
}

double resident_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1 << 20);
}

// First in this file, so first in a whole-binary run too: nothing has loaded the module yet.
TEST(LearnerModule, LibtorchIsLoadedOnlyWhenALearnerIsMade) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  Sampler sampler("CartPole-v1", 2, 0, 1, spec);  // a rollout worker's work loads nothing
  sampler.set_weights(fibra::rl::initial_weights(spec, 1));
  sampler.sample(5);
  ASSERT_FALSE(libtorch_loaded()) << "libtorch is in the process before any learner: fibra_rl links it";
  const double before = resident_mb();
  const auto start = std::chrono::steady_clock::now();
  PpoLearner learner(spec, PpoConfig{});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(libtorch_loaded());
  std::printf(
      "first learner (dlopen of the module, libtorch's start): %.3f s, resident memory %.0f -> %.0f MB (+%.0f)\n",
      seconds, before, resident_mb(), resident_mb() - before);
}

TEST(PolicyAndLearner, CategoricalAgree) {
  expect_policy_equals_learner("CartPole-v1", PpoConfig{}, PolicySpec::for_env("CartPole-v1"));
}
TEST(PolicyAndLearner, GaussianAgree) {
  expect_policy_equals_learner("Pendulum-v1", PpoConfig{}, PolicySpec::for_env("Pendulum-v1"));
}
TEST(PolicyAndLearner, ReluAgrees) {
  const PolicySpec spec = PolicySpec::for_env("Acrobot-v1", {32, 16}, fibra::rl::Activation::relu);
  PpoLearner learner(spec, PpoConfig{});
  learner.set_parameters(random_parameters(learner, 5, 0.3));
  fibra::rl::Policy policy(spec, learner.weights());
  std::vector<double> obs(6 * 5);
  fibra::rl::Rng rng(1);
  for (double& v : obs) v = rng.normal();
  const std::vector<double> actions{0, 1, 2, 1, 0};
  fibra::rl::Evaluation mine;
  policy.evaluate(obs, actions, mine);
  std::vector<float> fobs(obs.size());
  policy.normalise(obs, fobs);
  const std::vector<float> factions(actions.begin(), actions.end());
  const fibra::rl::Evaluation theirs = learner.evaluate(fobs, factions);
  for (std::size_t r = 0; r < 5; ++r) {
    expect_close(mine.logp[r], theirs.logp[r], "relu logp");
    EXPECT_EQ(mine.values[r], theirs.values[r]) << "relu value, row " << r;
  }
}

TEST(PpoLoss, CategoricalGradientMatchesFiniteDifferences) {
  expect_gradient_matches_finite_differences("CartPole-v1", PolicySpec::for_env("CartPole-v1", {5, 4}));
}
TEST(PpoLoss, GaussianGradientMatchesFiniteDifferences) {
  expect_gradient_matches_finite_differences("Pendulum-v1", PolicySpec::for_env("Pendulum-v1", {5, 4}));
}

// Two updates through one sampler of 8 copies or two of 4 (fragments given in either order).
std::vector<double> learn_twice(const std::vector<std::pair<int, int>>& parts, bool reversed) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  PpoConfig config;
  config.normalise_observations = true;
  config.minibatch_size = 64;
  config.epochs = 3;
  PpoLearner learner(spec, config);
  std::vector<Sampler> samplers;
  for (auto [first, n] : parts) samplers.emplace_back("CartPole-v1", n, first, 11, spec);
  for (int update = 0; update < 2; ++update) {
    std::vector<Fragment> fragments;
    for (Sampler& s : samplers) {
      s.set_weights(learner.weights());
      fragments.push_back(s.sample(16));
    }
    if (reversed) std::reverse(fragments.begin(), fragments.end());
    learner.learn(fragments);
  }
  std::vector<double> out = learner.parameters();
  const fibra::rl::PolicyWeights w = learner.weights();
  const fibra::rl::ObsMoments& m = w.normaliser.moments();
  out.insert(out.end(), m.mean.begin(), m.mean.end());
  out.insert(out.end(), m.m2.begin(), m.m2.end());
  return out;
}

TEST(PpoLearner, TheSameLearningForAnySplitOfTheCopies) {
  const std::vector<double> whole = learn_twice({{0, 8}}, false);
  EXPECT_EQ(whole, learn_twice({{0, 4}, {4, 4}}, false));
  EXPECT_EQ(whole, learn_twice({{0, 4}, {4, 4}}, true));
  EXPECT_EQ(whole, learn_twice({{0, 1}, {1, 3}, {4, 4}}, true));
}

TEST(PpoLearner, StateRoundTripContinuesBitForBit) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  PpoConfig config;
  config.normalise_observations = true;
  config.minibatch_size = 64;
  config.epochs = 2;
  PpoLearner a(spec, config);
  Sampler sampler("CartPole-v1", 4, 0, 3, spec);
  for (int i = 0; i < 2; ++i) {
    sampler.set_weights(a.weights());
    const Fragment f = sampler.sample(32);
    a.learn({&f, 1});
  }
  const std::vector<fibra::rl::NamedArray> state = a.state();
  EXPECT_EQ(state.front().name, "actor.0.weight");
  EXPECT_EQ(state.front().shape, (std::vector<std::int64_t>{64, 4}));
  PpoConfig other = config;
  other.seed = 99;  // different initial weights and minibatch order: load_state must replace both
  PpoLearner b(spec, other);
  b.load_state(state);
  EXPECT_EQ(b.weights().version, 2u);
  sampler.set_weights(a.weights());
  const Fragment f = sampler.sample(32);
  const fibra::rl::LearnStats sa = a.learn({&f, 1}), sb = b.learn({&f, 1});
  EXPECT_EQ(a.parameters(), b.parameters());
  EXPECT_EQ(sa.steps, 384);
  EXPECT_EQ(sa.policy_loss, sb.policy_loss);

  std::vector<fibra::rl::NamedArray> broken = state;
  broken.erase(broken.begin() + 3);
  try {
    b.load_state(broken);
    FAIL() << "no error";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_STREQ(e.what(), "fibra::rl: the learner's state has no array 'actor.2.bias'");
  }
  broken = state;
  broken[0].shape = {64, 5};
  try {
    b.load_state(broken);
    FAIL() << "no error";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::rl: the learner's state array 'actor.0.weight' has shape [64, 5]; this learner's is [64, 4] "
                 "(a checkpoint of another policy?)");
  }
}

TEST(PpoLearner, RefusesFragmentsOfAnotherPolicy) {
  PpoLearner learner(PolicySpec::for_env("CartPole-v1"), PpoConfig{});
  const PolicySpec acrobot = PolicySpec::for_env("Acrobot-v1");
  Sampler sampler("Acrobot-v1", 1, 0, 1, acrobot);
  sampler.set_weights(fibra::rl::initial_weights(acrobot, 1));
  const Fragment f = sampler.sample(2);
  EXPECT_THROW(learner.learn({&f, 1}), std::invalid_argument);
  EXPECT_THROW(learner.learn({}), std::invalid_argument);
}

}  // namespace
