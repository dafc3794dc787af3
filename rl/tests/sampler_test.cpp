// Sampler: the same fragments for one sampler of 8 copies as for two of 4; episodes go on across
// calls; the copies' seeds are VectorEnv's; bootstrap values where (and only where) an episode was
// truncated and not terminated; state() and restore(): a restored Sampler goes on as the saved
// one did, element for element; evaluate().
#include <fibra/rl/sampler.hpp>
#include <fibra/rl/vector_env.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace {

using fibra::rl::Fragment;
using fibra::rl::PolicySpec;
using fibra::rl::Sampler;

// Observation (steps into the episode); reward 1; truncated at 3 steps, and also terminated there
// if Terminates.
template <bool Terminates>
class Three : public fibra::rl::Env {
 public:
  fibra::rl::Box observation_space() const override { return {.shape = {1}, .low = {0}, .high = {3}}; }
  fibra::rl::Space action_space() const override { return fibra::rl::Discrete{1}; }
  std::span<const double> reset(std::uint64_t) override {
    obs_[0] = 0;
    return obs_;
  }
  fibra::rl::StepResult step(std::span<const double>) override {
    obs_[0] += 1;
    return {.observation = obs_, .reward = 1, .terminated = Terminates && obs_[0] >= 3, .truncated = obs_[0] >= 3};
  }

 private:
  std::array<double, 1> obs_{0};
};

// Not registered (the registry's tests list every name): made through Sampler's factory form.
template <bool Terminates>
std::unique_ptr<fibra::rl::Env> make_three() {
  return std::make_unique<Three<Terminates>>();
}

fibra::rl::PolicyWeights weights_for(const PolicySpec& spec, std::uint64_t seed) {
  fibra::rl::PolicyWeights w = fibra::rl::initial_weights(spec, seed);
  fibra::rl::Rng rng(seed);
  for (float& p : w.params) p = static_cast<float>(0.2 * rng.normal());  // a policy that is not uniform
  return w;
}

template <class T>
void expect_rows_equal(const std::vector<T>& whole, const std::vector<T>& a, const std::vector<T>& b, int steps,
                       int width, const char* what) {
  // whole: [t][8][width]; a, b: [t][4][width], copies 0-3 and 4-7.
  for (int t = 0; t < steps; ++t)
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < width; ++k) {
        const T w = whole[static_cast<std::size_t>((t * 8 + i) * width + k)];
        const T p = (i < 4 ? a : b)[static_cast<std::size_t>((t * 4 + i % 4) * width + k)];
        ASSERT_EQ(w, p) << what << " at step " << t << ", copy " << i;
      }
}

void expect_split_equals_whole(const std::string& env, int steps, int calls) {
  const PolicySpec spec = PolicySpec::for_env(env);
  fibra::rl::PolicyWeights w = weights_for(spec, 3);
  fibra::rl::ObsMoments m(spec.observation_size);  // some statistics, so normalisation does something
  fibra::rl::Rng rng(1);
  for (int r = 0; r < 10; ++r) {
    std::vector<double> row(static_cast<std::size_t>(spec.observation_size));
    for (double& v : row) v = rng.normal();
    m.add(row);
  }
  w.normaliser.merge(m);
  Sampler whole(env, 8, 0, 42, spec), first(env, 4, 0, 42, spec), second(env, 4, 4, 42, spec);
  for (Sampler* s : {&whole, &first, &second}) s->set_weights(w);
  int episodes = 0;
  for (int call = 0; call < calls; ++call) {
    const Fragment fw = whole.sample(steps), fa = first.sample(steps), fb = second.sample(steps);
    EXPECT_EQ(fb.first_env, 4);
    const int d = spec.observation_size, a = spec.action_size();
    expect_rows_equal(fw.observations, fa.observations, fb.observations, steps, d, "observations");
    expect_rows_equal(fw.actions, fa.actions, fb.actions, steps, a, "actions");
    expect_rows_equal(fw.logp, fa.logp, fb.logp, steps, 1, "logp");
    expect_rows_equal(fw.values, fa.values, fb.values, steps, 1, "values");
    expect_rows_equal(fw.rewards, fa.rewards, fb.rewards, steps, 1, "rewards");
    expect_rows_equal(fw.dones, fa.dones, fb.dones, steps, 1, "dones");
    expect_rows_equal(fw.bootstrap, fa.bootstrap, fb.bootstrap, steps, 1, "bootstrap");
    for (int i = 0; i < 8; ++i) {
      const Fragment& part = i < 4 ? fa : fb;
      EXPECT_EQ(fw.last_values[static_cast<std::size_t>(i)], part.last_values[static_cast<std::size_t>(i % 4)]);
      EXPECT_EQ(fw.raw_moments[static_cast<std::size_t>(i)].mean,
                part.raw_moments[static_cast<std::size_t>(i % 4)].mean);
      EXPECT_EQ(fw.raw_moments[static_cast<std::size_t>(i)].m2, part.raw_moments[static_cast<std::size_t>(i % 4)].m2);
    }
    std::vector<double> returns_whole = fw.episode_returns, returns_parts = fa.episode_returns;
    returns_parts.insert(returns_parts.end(), fb.episode_returns.begin(), fb.episode_returns.end());
    std::sort(returns_whole.begin(), returns_whole.end());
    std::sort(returns_parts.begin(), returns_parts.end());
    EXPECT_EQ(returns_whole, returns_parts);
    episodes += static_cast<int>(fw.episode_returns.size());
    if (env == "Pendulum-v1") {
      EXPECT_TRUE(std::any_of(fw.actions.begin(), fw.actions.end(), [](float x) { return std::abs(x) > 2; }))
          << "no draw outside the box: the clip is not exercised";
    }
  }
  EXPECT_GT(episodes, 0) << "no episode ended: the test does not cover resets";
}

TEST(Sampler, EightCopiesInOneEqualTwoOfFour) { expect_split_equals_whole("CartPole-v1", 40, 3); }

TEST(Sampler, EightCopiesInOneEqualTwoOfFourWithBoxActionsAndTruncation) {
  expect_split_equals_whole("Pendulum-v1", 110, 2);  // 220 steps: every copy truncated at 200
}

TEST(Sampler, EpisodesGoOnAcrossCalls) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  const auto w = weights_for(spec, 5);
  Sampler once("CartPole-v1", 3, 0, 7, spec), twice("CartPole-v1", 3, 0, 7, spec);
  once.set_weights(w);
  twice.set_weights(w);
  const Fragment all = once.sample(40);
  const Fragment a = twice.sample(15), b = twice.sample(25);
  std::vector<float> joined = a.observations;
  joined.insert(joined.end(), b.observations.begin(), b.observations.end());
  EXPECT_EQ(all.observations, joined);
  std::vector<float> rewards = a.rewards;
  rewards.insert(rewards.end(), b.rewards.begin(), b.rewards.end());
  EXPECT_EQ(all.rewards, rewards);
  EXPECT_EQ(all.last_values, b.last_values);
  EXPECT_EQ(twice.steps_sampled(), 120u);
}

TEST(Sampler, CopiesStartAsVectorEnvsCopies) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  Sampler sampler("CartPole-v1", 2, 3, 9, spec);  // copies 3 and 4
  sampler.set_weights(fibra::rl::initial_weights(spec, 1, /*normalise_observations=*/false));
  const Fragment f = sampler.sample(1);
  fibra::rl::VectorEnv envs("CartPole-v1", 5);
  const std::span<const double> obs = envs.reset(9);
  for (int k = 0; k < 8; ++k)
    EXPECT_EQ(f.observations[static_cast<std::size_t>(k)], static_cast<float>(obs[static_cast<std::size_t>(12 + k)]));
}

// A linear critic (no hidden layer) with V(x) = x: the bootstrap is visibly V(final observation).
fibra::rl::PolicyWeights identity_critic(const PolicySpec& spec) {
  fibra::rl::PolicyWeights w = fibra::rl::initial_weights(spec, 1, false);
  for (const auto& b : fibra::rl::parameter_layout(spec))
    if (b.name == "critic.0.weight")
      w.params[b.offset] = 1;
    else if (b.name == "critic.0.bias")
      w.params[b.offset] = 0;
  return w;
}

TEST(Sampler, BootstrapWhereTruncatedNotTerminated) {
  for (const bool terminates : {false, true}) {
    const std::string env = terminates ? "Terminating" : "Truncating";
    const PolicySpec spec{.observation_size = 1, .action_space = fibra::rl::Discrete{1}, .hidden = {}};
    Sampler sampler(terminates ? make_three<true> : make_three<false>, env, 2, 0, 1, spec);
    sampler.set_weights(identity_critic(spec));
    const Fragment f = sampler.sample(7);
    for (int t = 0; t < 7; ++t)
      for (int i = 0; i < 2; ++i) {
        const std::size_t k = static_cast<std::size_t>(t * 2 + i);
        EXPECT_EQ(f.values[k], static_cast<float>(t % 3)) << env << " step " << t;  // V(x_t) = steps into the episode
        EXPECT_EQ(f.dones[k], t % 3 == 2) << env << " step " << t;
        EXPECT_EQ(f.bootstrap[k], t % 3 == 2 && !terminates ? 3.0f : 0.0f) << env << " step " << t;
      }
    EXPECT_EQ(f.last_values, (std::vector<float>{1, 1}));  // after 7 steps: 1 step into the third episode
    EXPECT_EQ(f.episode_returns, (std::vector<double>{3, 3, 3, 3}));
    EXPECT_EQ(f.episode_lengths, (std::vector<int>{3, 3, 3, 3}));
    EXPECT_EQ(f.raw_moments[0].count, 7u);
  }
}

TEST(Sampler, RefusesASpecOfAnotherEnvAndSamplingWithoutWeights) {
  EXPECT_THROW(Sampler("Pendulum-v1", 1, 0, 1, PolicySpec::for_env("CartPole-v1")), fibra::ConfigError);
  Sampler s("CartPole-v1", 1, 0, 1, PolicySpec::for_env("CartPole-v1"));
  EXPECT_THROW(s.sample(1), std::logic_error);
}

void expect_same_fragment(const Fragment& x, const Fragment& y, const std::string& what) {
  EXPECT_EQ(x.first_env, y.first_env) << what;
  EXPECT_EQ(x.num_envs, y.num_envs) << what;
  EXPECT_EQ(x.observations, y.observations) << what << ": observations";
  EXPECT_EQ(x.actions, y.actions) << what << ": actions";
  EXPECT_EQ(x.logp, y.logp) << what << ": logp";
  EXPECT_EQ(x.values, y.values) << what << ": values";
  EXPECT_EQ(x.rewards, y.rewards) << what << ": rewards";
  EXPECT_EQ(x.dones, y.dones) << what << ": dones";
  EXPECT_EQ(x.bootstrap, y.bootstrap) << what << ": bootstrap";
  EXPECT_EQ(x.last_values, y.last_values) << what << ": last_values";
  ASSERT_EQ(x.raw_moments.size(), y.raw_moments.size()) << what;
  for (std::size_t i = 0; i < x.raw_moments.size(); ++i) {
    EXPECT_EQ(x.raw_moments[i].count, y.raw_moments[i].count) << what << ": moments of copy " << i;
    EXPECT_EQ(x.raw_moments[i].mean, y.raw_moments[i].mean) << what << ": moments of copy " << i;
    EXPECT_EQ(x.raw_moments[i].m2, y.raw_moments[i].m2) << what << ": moments of copy " << i;
  }
  EXPECT_EQ(x.episode_returns, y.episode_returns) << what << ": episode returns";
  EXPECT_EQ(x.episode_lengths, y.episode_lengths) << what << ": episode lengths";
}

// 3 fragments, the state, 2 more; a new Sampler restored from the state gives those 2 again.
void expect_restore_goes_on(const std::string& env, int steps) {
  const PolicySpec spec = PolicySpec::for_env(env);
  const auto w = weights_for(spec, 4);
  Sampler saved(env, 4, 2, 21, spec);
  saved.set_weights(w);
  for (int k = 0; k < 3; ++k) saved.sample(steps);
  const fibra::rl::SamplerState state = saved.state();
  ASSERT_EQ(state.copies.size(), 4u);
  EXPECT_TRUE(std::any_of(state.copies.begin(), state.copies.end(), [](const auto& c) { return c.episodes > 0; }))
      << "no episode ended before the state was taken: the test does not cover a replay after a reset";
  EXPECT_TRUE(std::any_of(state.copies.begin(), state.copies.end(), [](const auto& c) { return c.episode_length > 0; }))
      << "every copy is at the start of an episode: nothing to replay";
  const Fragment a = saved.sample(steps), b = saved.sample(steps);
  Sampler restored(env, 4, 2, 21, spec);
  restored.restore(state);
  restored.set_weights(w);
  EXPECT_EQ(restored.steps_sampled(), 3u * 4u * static_cast<unsigned>(steps));
  expect_same_fragment(restored.sample(steps), a, env + ", the first fragment after the restore");
  expect_same_fragment(restored.sample(steps), b, env + ", the second fragment after the restore");
}

TEST(SamplerState, ARestoredSamplerGoesOnAsTheSavedOne) { expect_restore_goes_on("CartPole-v1", 20); }

TEST(SamplerState, ARestoredSamplerGoesOnWithBoxActionsClipped) {
  expect_restore_goes_on("Pendulum-v1", 90);  // 270 steps: every copy past its first truncation at 200
}

TEST(SamplerState, CopiesSplitOverOtherSamplersGoOn) {
  // The state of copies 0-5 in one Sampler restores into Samplers of copies 0-1 and 2-5.
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  const auto w = weights_for(spec, 6);
  Sampler whole("CartPole-v1", 6, 0, 3, spec), first("CartPole-v1", 2, 0, 3, spec),
      second("CartPole-v1", 4, 2, 3, spec);
  whole.set_weights(w);
  for (int k = 0; k < 2; ++k) whole.sample(25);
  const fibra::rl::SamplerState state = whole.state();
  first.restore({.first_env = 0, .copies = {state.copies.begin(), state.copies.begin() + 2}});
  second.restore({.first_env = 2, .copies = {state.copies.begin() + 2, state.copies.end()}});
  first.set_weights(w);
  second.set_weights(w);
  const Fragment fw = whole.sample(25), fa = first.sample(25), fb = second.sample(25);
  for (int t = 0; t < 25; ++t)
    for (int i = 0; i < 6; ++i) {
      const Fragment& part = i < 2 ? fa : fb;
      const int j = i < 2 ? i : i - 2;
      ASSERT_EQ(fw.rewards[static_cast<std::size_t>(t * 6 + i)],
                part.rewards[static_cast<std::size_t>(t * part.num_envs + j)]);
      for (int k = 0; k < 4; ++k)
        ASSERT_EQ(fw.observations[static_cast<std::size_t>((t * 6 + i) * 4 + k)],
                  part.observations[static_cast<std::size_t>((t * part.num_envs + j) * 4 + k)])
            << "step " << t << ", copy " << i;
    }
}

TEST(SamplerState, AStateTakenBeforeAnySampleStartsAsANewSampler) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  const auto w = weights_for(spec, 2);
  Sampler fresh("CartPole-v1", 3, 0, 5, spec), restored("CartPole-v1", 3, 0, 5, spec);
  restored.restore(fresh.state());
  fresh.set_weights(w);
  restored.set_weights(w);
  expect_same_fragment(restored.sample(30), fresh.sample(30), "a restored unstarted Sampler");
}

TEST(SamplerState, RefusesAnotherSamplersCopiesAndAReplayThatEndsEarly) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  Sampler s("CartPole-v1", 2, 0, 1, spec);
  s.set_weights(weights_for(spec, 1));
  s.sample(3);
  Sampler other("CartPole-v1", 2, 2, 1, spec);
  try {
    other.restore(s.state());
    ADD_FAILURE() << "a state of copies 0-1 restored into copies 2-3";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::rl: cannot restore the Sampler of copies 2-3 of 'CartPole-v1': the state is of copies 0-1");
  }
  // Three's episodes end at step 3: a state of 5 steps cannot be its episode.
  const PolicySpec one{.observation_size = 1, .action_space = fibra::rl::Discrete{1}, .hidden = {}};
  Sampler three(make_three<true>, "Three", 1, 0, 1, one);
  fibra::rl::SamplerState bad{.first_env = 0, .copies = {{.episode_length = 5, .actions = {0, 0, 0, 0, 0}}}};
  try {
    three.restore(bad);
    ADD_FAILURE() << "a replay through the end of an episode was not noticed";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::rl: cannot restore copy 0 of 'Three': its episode ended at step 3 of the 5 replayed; "
                 "environments must be deterministic (the same seed and actions, the same episode), and the state "
                 "must be of this environment");
  }
  bad.copies[0].actions.pop_back();
  EXPECT_THROW(three.restore(bad), fibra::CheckpointError);  // 4 action values for 5 steps
}

TEST(Evaluate, PlaysWholeEpisodes) {
  // The initial actor is nearly uniform: CartPole's episodes last ~10 to 60 steps, all different.
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  const auto w = fibra::rl::initial_weights(spec, 1);
  const fibra::rl::EvalResult r = fibra::rl::evaluate("CartPole-v1", spec, w, 20, 1, /*greedy=*/false);
  ASSERT_EQ(r.returns.size(), 20u);
  for (std::size_t j = 0; j < 20; ++j) {
    EXPECT_EQ(r.returns[j], r.lengths[j]);  // reward 1 a step
    EXPECT_GE(r.returns[j], 8);
  }
  double mean = 0;
  for (double x : r.returns) mean += x / 20;
  EXPECT_DOUBLE_EQ(r.mean, mean);
  EXPECT_EQ(fibra::rl::evaluate("CartPole-v1", spec, w, 20, 1, false).returns, r.returns);
  EXPECT_NE(fibra::rl::evaluate("CartPole-v1", spec, w, 20, 2, false).returns, r.returns);
}

}  // namespace
