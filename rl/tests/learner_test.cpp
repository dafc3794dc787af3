// PpoLearner through the libtorch module: libtorch loaded only once a learner is made; Policy's
// inference equal to the learner's own evaluation; the loss's gradient against central finite
// differences in double; state() and load_state(); the same learning for any split of the copies.
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

// Random weights of visible size (the initial actor's output gain is 0.01).
std::vector<double> random_parameters(PpoLearner& learner, std::uint64_t seed, double scale) {
  std::vector<double> p = learner.parameters();
  fibra::rl::Rng rng(seed);
  for (double& v : p) v += scale * rng.normal();
  return p;
}

void expect_close(double a, double b, const std::string& what) {
  EXPECT_LE(std::abs(a - b), 1e-5 * std::max(1.0, std::abs(b))) << what << ": " << a << " vs " << b;
}

void expect_policy_equals_learner(const std::string& env, PpoConfig config) {
  const PolicySpec spec = PolicySpec::for_env(env);
  config.normalise_observations = true;
  PpoLearner learner(spec, config);
  learner.set_parameters(random_parameters(learner, 2, 0.2));
  fibra::rl::PolicyWeights w = learner.weights();
  fibra::rl::Rng rng(3);
  fibra::rl::ObsMoments m(spec.observation_size);  // statistics, so that normalisation matters
  std::vector<double> obs(static_cast<std::size_t>(spec.observation_size) * 32);
  for (double& v : obs) v = 3 * rng.normal() + 1;
  for (std::size_t r = 0; r < 32; ++r)
    m.add(std::span<const double>(obs).subspan(r * spec.observation_size, spec.observation_size));
  w.normaliser.merge(m);
  fibra::rl::Policy policy(spec, w);
  std::vector<fibra::rl::Rng> rngs;
  for (int i = 0; i < 32; ++i) rngs.emplace_back(100 + i);
  fibra::rl::ActBatch act;
  policy.act(obs, rngs, act);
  fibra::rl::Evaluation mine;
  policy.evaluate(obs, act.actions, mine);
  const std::vector<float> actions(act.actions.begin(), act.actions.end());
  const fibra::rl::Evaluation theirs = learner.evaluate(act.observations, actions);
  for (std::size_t r = 0; r < 32; ++r) {
    expect_close(act.logp[r], theirs.logp[r], env + " logp of act, row " + std::to_string(r));
    // The critic's forward pass is the same code on the same floats on both sides: equal to the bit.
    EXPECT_EQ(act.values[r], theirs.values[r]) << env << " value, row " << r;
    expect_close(mine.logp[r], theirs.logp[r], env + " logp of evaluate, row " + std::to_string(r));
    expect_close(mine.entropy[r], theirs.entropy[r], env + " entropy, row " + std::to_string(r));
  }
}

TEST(PolicyAndLearner, CategoricalAgree) { expect_policy_equals_learner("CartPole-v1", PpoConfig{}); }
TEST(PolicyAndLearner, GaussianAgree) { expect_policy_equals_learner("Pendulum-v1", PpoConfig{}); }
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

// A batch sampled from the env, then parameters moved so that the ratios differ from 1 (some
// clipped) and the value loss's clip engages.
void expect_gradient_matches_finite_differences(const std::string& env) {
  const PolicySpec spec = PolicySpec::for_env(env, {5, 4});
  PpoConfig config;
  config.float64 = true;
  config.clip_vloss = true;
  config.ent_coef = 0.01;
  PpoLearner learner(spec, config);
  Sampler sampler(env, 3, 0, 4, spec);
  learner.set_parameters(random_parameters(learner, 7, 0.3));
  sampler.set_weights(learner.weights());
  const Fragment f = sampler.sample(20);
  const fibra::rl::Batch batch = learner.make_batch({&f, 1});
  const std::vector<double> at = random_parameters(learner, 8, 0.05);
  learner.set_parameters(at);
  const fibra::rl::LossAndGradient g = learner.loss_and_gradient(batch);
  const double h = 1e-6;
  int checked = 0;
  double worst = 0;
  for (std::size_t i = 0; i < at.size(); ++i) {
    std::vector<double> p = at;
    p[i] = at[i] + h;
    learner.set_parameters(p);
    const double up = learner.loss_and_gradient(batch).loss;
    p[i] = at[i] - h;
    learner.set_parameters(p);
    const double down = learner.loss_and_gradient(batch).loss;
    const double fd = (up - down) / (2 * h);
    const double error = std::abs(fd - g.gradient[i]) / std::max(1e-3, std::abs(fd));
    worst = std::max(worst, error);
    EXPECT_LT(error, 1e-4) << env << " parameter " << i << ": finite difference " << fd << ", gradient "
                           << g.gradient[i];
    checked += std::abs(fd) > 1e-6;
  }
  learner.set_parameters(at);
  EXPECT_DOUBLE_EQ(learner.loss_and_gradient(batch).loss, g.loss);  // nothing moved
  EXPECT_GT(checked, static_cast<int>(at.size()) / 2) << "most of the gradient is zero: the test sees little";
  std::printf("%s: %zu parameters, %d with a non-zero gradient, worst relative error %.2e\n", env.c_str(), at.size(),
              checked, worst);
}

TEST(PpoLoss, CategoricalGradientMatchesFiniteDifferences) {
  expect_gradient_matches_finite_differences("CartPole-v1");
}
TEST(PpoLoss, GaussianGradientMatchesFiniteDifferences) { expect_gradient_matches_finite_differences("Pendulum-v1"); }

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
