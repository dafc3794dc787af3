// fibra/rl/sampler.hpp: rollouts. A Sampler steps M environment copies with a Policy and returns
// fragments of T steps (never whole episodes: an episode goes on across calls, so one long episode
// stalls nobody); evaluate() plays whole episodes for a score.
//
//   auto spec = fibra::rl::PolicySpec::for_env("CartPole-v1");
//   fibra::rl::Sampler sampler("CartPole-v1", 4, /*first_env=*/4, /*seed=*/1, spec);  // copies 4..7 of a run
//   sampler.set_weights(learner.weights());
//   fibra::rl::Fragment f = sampler.sample(32);       // 32 steps x 4 copies
//
// Determinism: everything random about copy g (its global index, first_env + i) is a function of
// the run's seed and g alone: its episodes' reset seeds (as VectorEnv's: copy seed s_g, the g-th draw
// of Rng(seed), episode k from Rng(s_g + k).next()) and its action generator. With Policy's
// row-independent inference, copies 0..7 give the same numbers in one Sampler of 8 as in two of 4.
//
// Checkpoints: state() says where every copy is (its episode's number, its action generator, the
// actions of the episode in progress), and restore() puts a new Sampler of the same copies there
// by resetting each copy with its episode's seed and stepping it through those actions again: no
// Env API beyond reset and step, since environments are deterministic by contract (the same seed
// and actions give the same episode; nothing is compared on the way).
//
//   fibra::rl::SamplerState saved = sampler.state();
//   fibra::rl::Sampler again("CartPole-v1", 4, 4, 1, spec);
//   again.restore(saved);   // its next sample() is the one `sampler` would have given
#pragma once

#include <fibra/rl/env.hpp>
#include <fibra/rl/normaliser.hpp>
#include <fibra/rl/policy.hpp>
#include <fibra/rl/rng.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fibra::rl {

/// @brief T steps of M environment copies, as the policy saw and did them. Arrays indexed [t][i]
/// are step-major: element t * num_envs + i is copy first_env + i at step t.
struct Fragment {
  int num_envs = 0, steps = 0;
  int observation_size = 0, action_size = 0;
  std::uint64_t policy_version = 0;  ///< PolicyWeights::version of the weights that acted
  int first_env = 0;                 ///< the global index of copy 0 of this fragment
  std::vector<float> observations;   ///< [t][i][obs]: normalised, as the policy saw them
  std::vector<float> actions;        ///< [t][i][action]: the index, or the Gaussian's unclipped draw
  std::vector<float> logp;           ///< [t][i]: the behaviour policy's log-probability of the action
  std::vector<float> values;         ///< [t][i]: the critic's value of the observation
  std::vector<float> rewards;        ///< [t][i]
  std::vector<std::uint8_t> dones;   ///< [t][i]: 1 where the episode ended in this step (terminated or truncated)
  std::vector<float> bootstrap;      ///< [t][i]: V(final observation) where truncated and not terminated, else 0
  std::vector<float> last_values;    ///< [i]: V of the observation after the last step
  /// [i]: the moments of the raw observations copy i was given (steps rows each), for the shared
  /// normaliser: one per copy, so the learner merges them in global order, the same for any split.
  std::vector<ObsMoments> raw_moments;
  std::vector<double> episode_returns;  ///< the episodes that ended in this fragment, in (step, copy) order
  std::vector<int> episode_lengths;     ///< their lengths in steps (their starts may lie in earlier fragments)

  /// @brief The number of transitions, steps * num_envs.
  std::size_t size() const { return static_cast<std::size_t>(steps) * static_cast<std::size_t>(num_envs); }

  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& num_envs& steps& observation_size& action_size& policy_version& first_env;
    ar& observations& actions& logp& values& rewards& dones& bootstrap& last_values& raw_moments;
    ar& episode_returns& episode_lengths;
  }
};

/// @brief Where one environment copy of a Sampler is, for checkpoints (SamplerState).
struct CopyState {
  std::uint64_t episodes = 0;  ///< episodes of this copy that ended: the one in progress is episode `episodes`
  std::uint64_t rng = 0;       ///< its action generator's state (Rng::state())
  std::uint64_t steps = 0;     ///< steps it took in all, over all its episodes
  double episode_return = 0;   ///< the return of the episode in progress so far
  int episode_length = 0;      ///< its steps so far
  /// The actions of the episode in progress, episode_length rows of the action's size, as they
  /// were stepped (a Box action clipped to the box): replayed after a reset with the episode's seed.
  std::vector<double> actions;

  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& episodes& rng& steps& episode_return& episode_length& actions;
  }
};

/// @brief A Sampler's state: its copies in order, first_env first. A copy that has not stepped yet
/// is at step 0 of episode 0, which is where a new Sampler's first sample() starts it.
struct SamplerState {
  int first_env = 0;  ///< the global index of copies[0]
  std::vector<CopyState> copies;

  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& first_env& copies;
  }
};

/// @brief M copies of an environment and a Policy: one rollout worker's state.
class Sampler {
 public:
  /// @brief `num_envs` copies of `env_name`, the global copies first_env .. first_env+num_envs-1 of
  /// the run whose seed is `seed`.
  /// @throws ConfigError for an unknown environment, num_envs < 1, first_env < 0, or a spec that
  /// does not fit the environment's spaces.
  Sampler(std::string env_name, int num_envs, int first_env, std::uint64_t seed, PolicySpec spec);
  /// @brief The same with copies made by `make` (an environment that needs arguments, or one not
  /// registered); `label` names it in errors.
  Sampler(const EnvFactory& make, std::string label, int num_envs, int first_env, std::uint64_t seed, PolicySpec spec);

  /// @brief The policy to act with from the next sample() on.
  /// @throws ConfigError if the weights do not fit the spec.
  void set_weights(const PolicyWeights& weights);
  /// @brief Steps every copy `steps` times (resetting them on the first call) and returns what
  /// happened. Episodes continue across calls.
  /// @throws std::logic_error before set_weights; std::invalid_argument for steps < 1.
  Fragment sample(int steps);

  /// @brief Where every copy is now (for a checkpoint): cheap, a copy of each episode's actions so far.
  SamplerState state() const;
  /// @brief Puts this Sampler where `state` says (state() of a Sampler of the same copies, the same
  /// seed and environment): each copy is reset with its episode's seed and stepped through the
  /// episode's actions, which takes as long as those steps did (microseconds a step for the
  /// built-ins). The weights are not part of it: set_weights before sample() as always.
  /// @throws CheckpointError if the state is of other copies (first_env, their number), an action
  /// row does not fit the action space, or an episode ends before its replay does (an environment
  /// that is not deterministic, or not the one saved).
  void restore(const SamplerState& state);

  int num_envs() const { return static_cast<int>(envs_.size()); }
  int first_env() const { return first_env_; }
  /// @brief Environment steps taken so far, over all copies.
  std::uint64_t steps_sampled() const { return steps_sampled_; }

 private:
  void start();
  void reset_copy(std::size_t i);
  void replay_copy(std::size_t i, const CopyState& c);

  std::string env_name_;
  int first_env_;
  PolicySpec spec_;
  std::vector<std::unique_ptr<Env>> envs_;
  std::optional<Box> action_box_;  // clip Gaussian draws to it when stepping
  std::vector<std::uint64_t> copy_seeds_, episodes_, copy_steps_;
  std::vector<Rng> rngs_;  // one action generator per copy
  std::optional<Policy> policy_;
  std::vector<double> obs_;  // the current raw observation of every copy
  std::vector<double> episode_return_;
  std::vector<int> episode_length_;
  std::vector<std::vector<double>> episode_actions_;  // each copy's episode so far, as stepped (for state())
  bool started_ = false;
  std::uint64_t steps_sampled_ = 0;
  ActBatch act_;  // reused between steps
};

/// @brief What evaluate() measured.
struct EvalResult {
  double mean = 0, std = 0;     ///< of the episodes' returns (std: the population's)
  std::vector<double> returns;  ///< one per episode
  std::vector<int> lengths;
};

/// @brief Plays `episodes` whole episodes of `env_name` (all in step, batched through one Policy),
/// with the greedy action (argmax or the Gaussian's mean, as Stable-Baselines3's deterministic
/// evaluation) or sampled ones; episode j starts from the j-th draw of Rng(seed).
/// @throws ConfigError as Sampler does.
EvalResult evaluate(std::string_view env_name, const PolicySpec& spec, const PolicyWeights& weights, int episodes,
                    std::uint64_t seed, bool greedy = true);

}  // namespace fibra::rl
