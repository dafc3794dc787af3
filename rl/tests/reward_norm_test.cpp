// PpoConfig::normalise_rewards: the learner divides each reward by the running standard deviation
// of its copy's discounted return and clips it, before GAE. Checked against the rule computed here
// step by step (Welford's moments over the returns in (step, global copy) order), against GAE on
// those rewards, for any split of the copies into fragments, and across a checkpoint.
#include <fibra/rl/gae.hpp>
#include <fibra/rl/ppo.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

using fibra::rl::Batch;
using fibra::rl::Fragment;
using fibra::rl::PolicySpec;
using fibra::rl::PpoConfig;
using fibra::rl::PpoLearner;
using fibra::rl::Sampler;

PpoConfig normalising(double clip = 10) {
  PpoConfig c;
  c.gamma = 0.9;
  c.gae_lambda = 0.95;
  c.seed = 5;
  c.normalise_rewards = true;
  c.reward_clip = clip;
  return c;
}

// Copies [first, first + n) of a CartPole sampler of 4 copies, `steps` steps.
Fragment sample(const PpoLearner& learner, int first, int n, int steps) {
  Sampler s("CartPole-v1", n, first, 3, learner.spec());
  s.set_weights(learner.weights());
  return s.sample(steps);
}

// The moments as Gymnasium's RunningMeanStd keeps them (mean 0, variance 1, count 1e-4 at first),
// updated with one value at a time: its parallel formula with a batch of one.
struct Moments {
  double count = 1e-4, mean = 0, var = 1;
  void update(double x) {
    const double batch_mean = x, batch_var = 0, batch_count = 1;
    const double delta = batch_mean - mean, total = count + batch_count;
    const double m_a = var * count, m_b = batch_var * batch_count;
    const double m2 = m_a + m_b + delta * delta * count * batch_count / total;
    mean = mean + delta * batch_count / total;
    var = m2 / total;
    count = total;
  }
};

// The rule, written out: per copy g <- gamma g + r; the moments of every g so far; r / sqrt(var +
// 1e-8), clipped; g <- 0 after a step that ended an episode. Rows [t][i] as the fragment's.
std::vector<float> scaled_by_hand(const Fragment& f, double gamma, double clip, std::vector<double>& g, Moments& m) {
  std::vector<float> out(f.size());
  for (int t = 0; t < f.steps; ++t)
    for (int i = 0; i < f.num_envs; ++i) {
      const std::size_t k = std::size_t(t) * std::size_t(f.num_envs) + std::size_t(i);
      g[std::size_t(i)] = gamma * g[std::size_t(i)] + f.rewards[k];
      m.update(g[std::size_t(i)]);
      out[k] = float(std::clamp(f.rewards[k] / std::sqrt(m.var + 1e-8), -clip, clip));
      if (f.dones[k]) g[std::size_t(i)] = 0;
    }
  return out;
}

// GAE over `f` with `rewards` in place of its own, rows in the batch's order (copy, then step).
void expect_batch_is_gae_of(const Batch& b, const Fragment& f, const std::vector<float>& rewards, double gamma,
                            double lambda, std::int64_t first_row = 0) {
  fibra::rl::Trajectory traj = fibra::rl::Trajectory::of(f);
  traj.rewards = rewards;
  std::vector<float> adv(f.size()), ret(f.size());
  fibra::rl::gae(traj, gamma, lambda, adv, ret);
  ASSERT_GE(b.size, first_row + std::int64_t(f.size()));
  std::int64_t row = first_row;
  for (int i = 0; i < f.num_envs; ++i)
    for (int t = 0; t < f.steps; ++t, ++row) {
      const std::size_t k = std::size_t(t) * std::size_t(f.num_envs) + std::size_t(i);
      EXPECT_EQ(b.advantages[std::size_t(row)], adv[k]) << "copy " << i << " step " << t;
      EXPECT_EQ(b.returns[std::size_t(row)], ret[k]) << "copy " << i << " step " << t;
    }
}

TEST(RewardNormalisation, ScalesByTheRunningDeviationOfTheDiscountedReturn) {
  PpoLearner learner(PolicySpec::for_env("CartPole-v1"), normalising());
  std::vector<double> g(4, 0.0);
  Moments m;
  for (int round = 0; round < 3; ++round) {  // the statistics carry over from one learn() to the next
    const Fragment f = sample(learner, 0, 4, 40);
    int ends = 0;
    for (auto d : f.dones) ends += d;
    if (round == 2) {
      ASSERT_GT(ends, 0) << "no episode ended: the test would not see the returns restart";
    }
    const std::vector<float> scaled = scaled_by_hand(f, 0.9, 10, g, m);
    const Batch b = learner.make_batch({&f, 1});
    expect_batch_is_gae_of(b, f, scaled, 0.9, 0.95);
    EXPECT_NE(scaled[5], f.rewards[5]) << "a CartPole reward of 1 should have been scaled";
    learner.learn({&f, 1});
  }
}

TEST(RewardNormalisation, ClipsTheScaledRewards) {
  PpoLearner learner(PolicySpec::for_env("CartPole-v1"), normalising(0.5));
  const Fragment f = sample(learner, 0, 4, 20);
  std::vector<double> g(4, 0.0);
  Moments m;
  const std::vector<float> scaled = scaled_by_hand(f, 0.9, 0.5, g, m);
  ASSERT_TRUE(std::any_of(scaled.begin(), scaled.end(), [](float r) { return r == 0.5f; }))
      << "nothing reached the clip: the test would not see it";
  expect_batch_is_gae_of(learner.make_batch({&f, 1}), f, scaled, 0.9, 0.95);
}

// The asynchronous learner's round may hold two fragments of the same copies, one sampled after
// the other: the returns go on from the first into the second.
TEST(RewardNormalisation, TwoFragmentsOfTheSameCopiesGoInTheOrderSampled) {
  PpoLearner learner(PolicySpec::for_env("CartPole-v1"), normalising());
  Sampler s("CartPole-v1", 4, 0, 3, learner.spec());
  s.set_weights(learner.weights());
  const Fragment both[] = {s.sample(25), s.sample(25)};
  std::vector<double> g(4, 0.0);
  Moments m;
  const std::vector<float> first = scaled_by_hand(both[0], 0.9, 10, g, m);
  const std::vector<float> second = scaled_by_hand(both[1], 0.9, 10, g, m);
  const Batch b = learner.make_batch(both);
  ASSERT_EQ(b.size, std::int64_t(both[0].size() + both[1].size()));
  expect_batch_is_gae_of(b, both[0], first, 0.9, 0.95);
  expect_batch_is_gae_of(b, both[1], second, 0.9, 0.95, std::int64_t(both[0].size()));
}

TEST(RewardNormalisation, IsTheSameForAnySplitOfTheCopies) {
  PpoLearner whole(PolicySpec::for_env("CartPole-v1"), normalising());
  PpoLearner split(PolicySpec::for_env("CartPole-v1"), normalising());
  for (int round = 0; round < 2; ++round) {
    const Fragment all = sample(whole, 0, 4, 30);
    const Fragment parts[] = {sample(split, 2, 2, 30), sample(split, 0, 2, 30)};  // out of order on purpose
    const Batch a = whole.make_batch({&all, 1}), b = split.make_batch(parts);
    ASSERT_EQ(a.size, b.size);
    EXPECT_EQ(a.advantages, b.advantages);
    EXPECT_EQ(a.returns, b.returns);
    whole.learn({&all, 1});
    split.learn(parts);
  }
}

TEST(RewardNormalisation, ResumesFromACheckpoint) {
  PpoLearner a(PolicySpec::for_env("CartPole-v1"), normalising());
  const Fragment first = sample(a, 0, 4, 30);
  a.learn({&first, 1});
  PpoLearner b(PolicySpec::for_env("CartPole-v1"), normalising());
  b.load_state(a.state());
  const Fragment next = sample(a, 0, 4, 30);
  EXPECT_EQ(a.make_batch({&next, 1}).advantages, b.make_batch({&next, 1}).advantages);
  // A learner that never saw `first` scales `next` otherwise: the state carried something.
  PpoLearner fresh(PolicySpec::for_env("CartPole-v1"), normalising());
  EXPECT_NE(a.make_batch({&next, 1}).advantages, fresh.make_batch({&next, 1}).advantages);
  // And a checkpoint of a learner without it is refused by one with it, naming the array.
  PpoConfig off = normalising();
  off.normalise_rewards = false;
  PpoLearner plain(PolicySpec::for_env("CartPole-v1"), off);
  try {
    b.load_state(plain.state());
    FAIL() << "a state without the reward normaliser was taken";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("reward_normaliser"), std::string::npos) << e.what();
  }
}

}  // namespace
