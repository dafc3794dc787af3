// Sampler: fragments of T steps over M copies, seeded by the copies' global indices; evaluate().
#include <fibra/rl/sampler.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace fibra::rl {
namespace {

// Copy g's seed: the g-th draw (from 0) of Rng(seed), as VectorEnv::reset gives copy g.
std::uint64_t copy_seed(std::uint64_t seed, int g) {
  Rng master(seed);
  for (int i = 0; i < g; ++i) master.next();
  return master.next();
}

// Episode k of a copy, as VectorEnv's episode_seed.
std::uint64_t episode_seed(std::uint64_t copy_seed, std::uint64_t k) { return Rng(copy_seed + k).next(); }

// The copy's action generator: another stream from its seed (a constant keeps it apart from the
// episodes' seeds, which are draws at copy_seed + k).
Rng action_rng(std::uint64_t copy_seed) { return Rng(Rng(copy_seed ^ 0xA0761D6478BD642Full).next()); }

void check_fits(const std::string& env_name, const Env& env, const PolicySpec& spec) {
  const Space space = env.action_space();
  const bool same_kind = space.index() == spec.action_space.index();
  const bool same_size =
      same_kind && (spec.discrete() ? std::get<Discrete>(space).n == spec.actor_outputs()
                                    : std::get<Box>(space).size() == std::get<Box>(spec.action_space).size());
  if (static_cast<int>(env.observation_space().size()) != spec.observation_size || !same_size)
    throw ConfigError("fibra::rl: the policy spec (" + std::to_string(spec.observation_size) + " observations, " +
                      std::to_string(spec.actor_outputs()) + (spec.discrete() ? " discrete" : " continuous") +
                      " actions) does not fit '" + env_name + "' (" + std::to_string(env.observation_space().size()) +
                      " observations); make it with PolicySpec::for_env(\"" + env_name + "\")");
}

}  // namespace

Sampler::Sampler(std::string env_name, int num_envs, int first_env, std::uint64_t seed, PolicySpec spec)
    : Sampler([&env_name] { return make_env(env_name); }, env_name, num_envs, first_env, seed, std::move(spec)) {}

Sampler::Sampler(const EnvFactory& make, std::string label, int num_envs, int first_env, std::uint64_t seed,
                 PolicySpec spec)
    : env_name_(std::move(label)), first_env_(first_env), spec_(std::move(spec)) {
  if (num_envs < 1 || first_env < 0)
    throw ConfigError("fibra::rl: Sampler(\"" + env_name_ + "\", " + std::to_string(num_envs) + " copies from " +
                      std::to_string(first_env) + "): needs at least one copy and a first index >= 0");
  for (int i = 0; i < num_envs; ++i) {
    envs_.push_back(make());
    if (!envs_.back()) throw ConfigError("fibra::rl: the factory of '" + env_name_ + "' gave a null environment");
    copy_seeds_.push_back(copy_seed(seed, first_env + i));
    rngs_.push_back(action_rng(copy_seeds_.back()));
  }
  check_fits(env_name_, *envs_[0], spec_);
  if (!spec_.discrete()) action_box_ = std::get<Box>(envs_[0]->action_space());
  episodes_.assign(envs_.size(), 0);
  episode_return_.assign(envs_.size(), 0.0);
  episode_length_.assign(envs_.size(), 0);
  episode_actions_.assign(envs_.size(), {});
  copy_steps_.assign(envs_.size(), 0);
  obs_.assign(envs_.size() * static_cast<std::size_t>(spec_.observation_size), 0.0);
}

void Sampler::set_weights(const PolicyWeights& weights) {
  if (policy_)
    policy_->set_weights(weights);
  else
    policy_.emplace(spec_, weights);
}

void Sampler::reset_copy(std::size_t i) {
  const std::span<const double> o = envs_[i]->reset(episode_seed(copy_seeds_[i], episodes_[i]));
  std::copy(o.begin(), o.end(),
            obs_.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(spec_.observation_size)));
  episode_return_[i] = 0;
  episode_length_[i] = 0;
  episode_actions_[i].clear();
}

void Sampler::start() {
  for (std::size_t i = 0; i < envs_.size(); ++i) reset_copy(i);
  started_ = true;
}

Fragment Sampler::sample(int steps) {
  if (!policy_)
    throw std::logic_error("fibra::rl: Sampler::sample before set_weights: give it the policy's weights first");
  if (steps < 1)
    throw std::invalid_argument("fibra::rl: Sampler::sample(" + std::to_string(steps) + "): steps must be >= 1");
  if (!started_) start();
  const std::size_t n = envs_.size(), d = static_cast<std::size_t>(spec_.observation_size);
  const std::size_t a = static_cast<std::size_t>(spec_.action_size()), rows = n * static_cast<std::size_t>(steps);
  Fragment f;
  f.num_envs = static_cast<int>(n);
  f.steps = steps;
  f.observation_size = static_cast<int>(d);
  f.action_size = static_cast<int>(a);
  f.policy_version = policy_->version();
  f.first_env = first_env_;
  f.observations.resize(rows * d);
  f.actions.resize(rows * a);
  f.logp.resize(rows);
  f.values.resize(rows);
  f.rewards.resize(rows);
  f.dones.resize(rows);
  f.bootstrap.assign(rows, 0.0f);
  f.raw_moments.assign(n, ObsMoments(static_cast<int>(d)));

  std::vector<double> clipped(a), final_obs;
  std::vector<std::size_t> truncated;  // copies to bootstrap this step
  std::vector<double> bootstrap_values;
  for (int t = 0; t < steps; ++t) {
    const std::size_t base = static_cast<std::size_t>(t) * n;
    policy_->act(obs_, rngs_, act_);
    std::copy(act_.observations.begin(), act_.observations.end(),
              f.observations.begin() + static_cast<std::ptrdiff_t>(base * d));
    std::transform(act_.actions.begin(), act_.actions.end(), f.actions.begin() + static_cast<std::ptrdiff_t>(base * a),
                   [](double v) { return static_cast<float>(v); });
    truncated.clear();
    final_obs.clear();
    for (std::size_t i = 0; i < n; ++i) {
      f.raw_moments[i].add(std::span<const double>(obs_).subspan(i * d, d));
      f.logp[base + i] = static_cast<float>(act_.logp[i]);
      f.values[base + i] = static_cast<float>(act_.values[i]);
      std::span<const double> action(act_.actions.data() + i * a, a);
      if (action_box_) {  // step with the draw clipped to the box; the fragment keeps the draw
        for (std::size_t j = 0; j < a; ++j)
          clipped[j] = std::clamp(action[j], action_box_->low[j], action_box_->high[j]);
        action = clipped;
      }
      episode_actions_[i].insert(episode_actions_[i].end(), action.begin(), action.end());
      const StepResult r = envs_[i]->step(action);
      f.rewards[base + i] = static_cast<float>(r.reward);
      episode_return_[i] += r.reward;
      ++episode_length_[i];
      const bool done = r.terminated || r.truncated;
      f.dones[base + i] = done;
      if (done) {
        if (!r.terminated) {
          truncated.push_back(i);
          final_obs.insert(final_obs.end(), r.observation.begin(), r.observation.end());
        }
        f.episode_returns.push_back(episode_return_[i]);
        f.episode_lengths.push_back(episode_length_[i]);
        ++episodes_[i];
        reset_copy(i);
      } else {
        std::copy(r.observation.begin(), r.observation.end(), obs_.begin() + static_cast<std::ptrdiff_t>(i * d));
      }
    }
    if (!truncated.empty()) {
      policy_->values(final_obs, bootstrap_values);
      for (std::size_t j = 0; j < truncated.size(); ++j)
        f.bootstrap[base + truncated[j]] = static_cast<float>(bootstrap_values[j]);
    }
  }
  std::vector<double> last;
  policy_->values(obs_, last);
  f.last_values.assign(last.begin(), last.end());
  steps_sampled_ += rows;
  for (auto& c : copy_steps_) c += static_cast<std::uint64_t>(steps);
  return f;
}

SamplerState Sampler::state() const {
  SamplerState s;
  s.first_env = first_env_;
  for (std::size_t i = 0; i < envs_.size(); ++i)
    s.copies.push_back({.episodes = episodes_[i],
                        .rng = rngs_[i].state(),
                        .steps = copy_steps_[i],
                        .episode_return = episode_return_[i],
                        .episode_length = episode_length_[i],
                        .actions = episode_actions_[i]});
  return s;
}

void Sampler::restore(const SamplerState& state) {
  const auto refuse = [&](const std::string& why) {
    throw CheckpointError("fibra::rl: cannot restore the Sampler of copies " + std::to_string(first_env_) + "-" +
                          std::to_string(first_env_ + num_envs() - 1) + " of '" + env_name_ + "': " + why);
  };
  if (state.first_env != first_env_ || state.copies.size() != envs_.size())
    refuse("the state is of copies " + std::to_string(state.first_env) + "-" +
           std::to_string(state.first_env + static_cast<int>(state.copies.size()) - 1));
  const auto a = static_cast<std::size_t>(spec_.action_size());
  for (std::size_t i = 0; i < envs_.size(); ++i) {
    const CopyState& c = state.copies[i];
    if (c.episode_length < 0 || c.actions.size() != static_cast<std::size_t>(c.episode_length) * a)
      refuse("copy " + std::to_string(first_env_ + static_cast<int>(i)) + " has " + std::to_string(c.actions.size()) +
             " action values for an episode of " + std::to_string(c.episode_length) + " steps of " + std::to_string(a));
  }
  steps_sampled_ = 0;
  for (std::size_t i = 0; i < envs_.size(); ++i) {
    const CopyState& c = state.copies[i];
    episodes_[i] = c.episodes;
    rngs_[i] = Rng(c.rng);
    copy_steps_[i] = c.steps;
    steps_sampled_ += c.steps;
    replay_copy(i, c);
  }
  // (a copy that never stepped is reset above as start() would: the first sample() goes on from there)
  started_ = true;
}

// Copy i's episode again: reset with its seed, then its actions. Environments are deterministic by
// contract, so this is the episode as it was; only an end before the last action is noticed.
void Sampler::replay_copy(std::size_t i, const CopyState& c) {
  reset_copy(i);
  const std::size_t d = static_cast<std::size_t>(spec_.observation_size),
                    a = static_cast<std::size_t>(spec_.action_size());
  const auto steps = static_cast<std::size_t>(c.episode_length);
  for (std::size_t t = 0; t < steps; ++t) {
    const StepResult r = envs_[i]->step(std::span<const double>(c.actions).subspan(t * a, a));
    if (r.terminated || r.truncated)
      throw CheckpointError("fibra::rl: cannot restore copy " + std::to_string(first_env_ + static_cast<int>(i)) +
                            " of '" + env_name_ + "': its episode ended at step " + std::to_string(t + 1) + " of the " +
                            std::to_string(steps) +
                            " replayed; environments must be deterministic (the same seed and actions, the "
                            "same episode), and the state must be of this environment");
    if (t + 1 == steps)
      std::copy(r.observation.begin(), r.observation.end(), obs_.begin() + static_cast<std::ptrdiff_t>(i * d));
  }
  episode_return_[i] = c.episode_return;
  episode_length_[i] = c.episode_length;
  episode_actions_[i] = c.actions;
}

EvalResult evaluate(std::string_view env_name, const PolicySpec& spec, const PolicyWeights& weights, int episodes,
                    std::uint64_t seed, bool greedy) {
  if (episodes < 1)
    throw ConfigError("fibra::rl: evaluate needs at least one episode, got " + std::to_string(episodes));
  Policy policy(spec, weights);
  const auto a = static_cast<std::size_t>(spec.action_size());
  std::vector<std::unique_ptr<Env>> envs;
  std::vector<Rng> rngs;
  std::vector<double> obs;
  Rng seeds(seed);
  for (int j = 0; j < episodes; ++j) {
    envs.push_back(make_env(env_name));
    if (j == 0) check_fits(std::string(env_name), *envs[0], spec);
    const std::uint64_t s = seeds.next();
    rngs.push_back(action_rng(s));
    const std::span<const double> o = envs.back()->reset(s);
    obs.insert(obs.end(), o.begin(), o.end());
  }
  const Space space = envs[0]->action_space();
  const Box* box = std::get_if<Box>(&space);
  EvalResult result;
  result.returns.assign(static_cast<std::size_t>(episodes), 0.0);
  result.lengths.assign(static_cast<std::size_t>(episodes), 0);
  std::vector<std::size_t> running(static_cast<std::size_t>(episodes));
  for (std::size_t j = 0; j < running.size(); ++j) running[j] = j;
  ActBatch out;
  std::vector<Rng> running_rngs;
  std::vector<double> action(a);
  while (!running.empty()) {
    if (greedy) {
      policy.act_greedy(obs, out);
    } else {
      running_rngs.clear();
      for (std::size_t j : running) running_rngs.push_back(rngs[j]);
      policy.act(obs, running_rngs, out);
      for (std::size_t r = 0; r < running.size(); ++r) rngs[running[r]] = running_rngs[r];
    }
    std::vector<std::size_t> still;
    std::vector<double> still_obs;
    for (std::size_t r = 0; r < running.size(); ++r) {
      const std::size_t j = running[r];
      for (std::size_t k = 0; k < a; ++k)
        action[k] = box ? std::clamp(out.actions[r * a + k], box->low[k], box->high[k]) : out.actions[r * a + k];
      const StepResult s = envs[j]->step(action);
      result.returns[j] += s.reward;
      ++result.lengths[j];
      if (!s.terminated && !s.truncated) {
        still.push_back(j);
        still_obs.insert(still_obs.end(), s.observation.begin(), s.observation.end());
      }
    }
    running = std::move(still);
    obs = std::move(still_obs);
  }
  double sum = 0, sq = 0;
  for (double r : result.returns) sum += r;
  result.mean = sum / episodes;
  for (double r : result.returns) sq += (r - result.mean) * (r - result.mean);
  result.std = std::sqrt(sq / episodes);
  return result;
}

}  // namespace fibra::rl
