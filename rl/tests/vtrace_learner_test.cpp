// PpoLearner::learn_vtrace, the asynchronous learner's update: on its own policy's fragments (no
// lag), with lambda 1 and the importance weights at 1, V-trace's targets are the discounted
// returns, so its batch must equal GAE(lambda = 1)'s; with a lag the weights differ from 1 and the
// targets move; and an update from stale fragments still learns (the version goes up).
#include <fibra/rl/ppo.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using fibra::rl::Batch;
using fibra::rl::Fragment;
using fibra::rl::PolicySpec;
using fibra::rl::PpoConfig;
using fibra::rl::PpoLearner;
using fibra::rl::Sampler;
using fibra::rl::VtraceConfig;

PpoConfig lambda_one() {
  PpoConfig c;
  c.gae_lambda = 1.0;
  c.gamma = 0.9;
  c.seed = 5;
  return c;
}

Fragment sample(PpoLearner& learner, int steps, std::uint64_t seed = 3) {
  Sampler s("CartPole-v1", 4, 0, seed, learner.spec());
  s.set_weights(learner.weights());
  return s.sample(steps);
}

TEST(VtraceLearner, OnPolicyTargetsAreGaeWithLambdaOne) {
  PpoLearner learner(PolicySpec::for_env("CartPole-v1"), lambda_one());
  const Fragment f = sample(learner, 64);  // 64 steps of 4 copies: episodes end inside it
  const Batch gae = learner.make_batch({&f, 1});
  const Batch vt = learner.make_vtrace_batch({&f, 1}, VtraceConfig{.gamma = 0.9, .lambda = 1.0});
  ASSERT_EQ(gae.size, vt.size);
  int ends = 0;
  for (auto d : f.dones) ends += d;
  ASSERT_GT(ends, 0) << "no episode ended in the fragment: the test would not see the cuts";
  for (std::int64_t k = 0; k < gae.size; ++k) {
    // (the learner's log-probabilities are the sampler's within 1e-5, so the weights are 1 to that)
    EXPECT_NEAR(vt.returns[k], gae.returns[k], 1e-3 * (1 + std::abs(gae.returns[k]))) << "row " << k;
    EXPECT_NEAR(vt.advantages[k], gae.advantages[k], 1e-3 * (1 + std::abs(gae.returns[k]))) << "row " << k;
    EXPECT_NEAR(vt.logp[k], gae.logp[k], 1e-5) << "row " << k;
    EXPECT_EQ(vt.values[k], gae.values[k]) << "row " << k;
  }
}

TEST(VtraceLearner, StaleFragmentsAreCorrectedAndLearnedFrom) {
  PpoLearner learner(PolicySpec::for_env("CartPole-v1"), lambda_one());
  const Fragment stale = sample(learner, 64);  // sampled with version 0
  for (int i = 0; i < 3; ++i) {                // the learner moves on
    const Fragment f = sample(learner, 32, 10 + i);
    learner.learn({&f, 1});
  }
  const Batch gae = learner.make_batch({&stale, 1});  // (the behaviour's logp and values)
  const Batch vt = learner.make_vtrace_batch({&stale, 1}, VtraceConfig{.gamma = 0.9, .lambda = 1.0});
  double logp_gap = 0, value_gap = 0;
  for (std::int64_t k = 0; k < vt.size; ++k) {
    logp_gap = std::max(logp_gap, double(std::abs(vt.logp[k] - gae.logp[k])));
    value_gap = std::max(value_gap, double(std::abs(vt.values[k] - gae.values[k])));
  }
  EXPECT_GT(logp_gap, 1e-3) << "the learner's policy should differ from the stale behaviour's";
  EXPECT_GT(value_gap, 1e-3) << "the learner's critic should differ from the stale one";
  // The targets are V-trace's over the learner's values and log-probabilities (composed here from
  // evaluate() and vtrace(): the batch's rows are (copy, step), the fragment's [step][copy]).
  const auto e = learner.evaluate(stale.observations, stale.actions);
  const std::vector<float> target(e.logp.begin(), e.logp.end()), values(e.values.begin(), e.values.end());
  auto traj = fibra::rl::Trajectory::of(stale);
  traj.values = values;
  const auto want = fibra::rl::vtrace(traj, stale.logp, target, VtraceConfig{.gamma = 0.9, .lambda = 1.0});
  for (int i = 0; i < stale.num_envs; ++i)
    for (int t = 0; t < stale.steps; ++t) {
      const std::size_t row = static_cast<std::size_t>(i * stale.steps + t), k = std::size_t(t * stale.num_envs + i);
      EXPECT_EQ(vt.returns[row], want.vs[k]) << "copy " << i << " step " << t;
      EXPECT_EQ(vt.advantages[row], want.pg_advantages[k]) << "copy " << i << " step " << t;
    }
  const auto version = learner.weights().version;
  const auto stats = learner.learn_vtrace({&stale, 1}, VtraceConfig{.gamma = 0.9}, 2);
  EXPECT_EQ(learner.weights().version, version + 1);
  EXPECT_EQ(stats.minibatches, 2);  // 256 rows, minibatches of 256, 2 epochs
  EXPECT_TRUE(std::isfinite(stats.policy_loss) && std::isfinite(stats.value_loss));
}

}  // namespace
