// Checks of a PpoLearner that the tests of the built-in MLPs and of a user's torch network share:
// Policy's inference against the learner's own evaluation, and the loss's gradient against
// central finite differences in double.
#pragma once

#include <fibra/rl/ppo.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace fibra::rl::test {

// Random weights of visible size (the initial actor's output gain is 0.01).
inline std::vector<double> random_parameters(PpoLearner& learner, std::uint64_t seed, double scale) {
  std::vector<double> p = learner.parameters();
  fibra::rl::Rng rng(seed);
  for (double& v : p) v += scale * rng.normal();
  return p;
}

inline void expect_close(double a, double b, const std::string& what) {
  EXPECT_LE(std::abs(a - b), 1e-5 * std::max(1.0, std::abs(b))) << what << ": " << a << " vs " << b;
}

// The critic's values equal to the bit for the built-in MLPs (the same code on the same floats on
// both sides), within 1e-5 for a user's network (libtorch's float32 on both sides, batched alike
// or not).
inline void expect_policy_equals_learner(const std::string& env, PpoConfig config, PolicySpec spec) {
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
    if (spec.torch_module.empty())
      EXPECT_EQ(act.values[r], theirs.values[r]) << env << " value, row " << r;
    else
      expect_close(act.values[r], theirs.values[r], env + " value, row " + std::to_string(r));
    expect_close(mine.logp[r], theirs.logp[r], env + " logp of evaluate, row " + std::to_string(r));
    expect_close(mine.entropy[r], theirs.entropy[r], env + " entropy, row " + std::to_string(r));
  }
}

// A batch sampled from the env, then parameters moved so that the ratios differ from 1 (some
// clipped) and the value loss's clip engages.
inline void expect_gradient_matches_finite_differences(const std::string& env, const PolicySpec& spec) {
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

}  // namespace fibra::rl::test
