// fibra/rl/ppo.hpp: PPO (Schulman et al. 2017) as CleanRL's ppo.py computes it: GAE(lambda),
// the clipped surrogate, a value loss (clipped or not), an entropy bonus, minibatch epochs, Adam,
// gradient clipping, advantage normalisation per minibatch, linear schedules for the learning rate
// and the clip range, and the shared observation normaliser.
//
//   auto spec = fibra::rl::PolicySpec::for_env("CartPole-v1");
//   fibra::rl::PpoLearner learner(spec, fibra::rl::PpoConfig{});     // loads the libtorch module
//   fibra::rl::Sampler sampler("CartPole-v1", 8, 0, /*seed=*/1, spec);
//   for (int i = 0; i < 390; ++i) {
//     sampler.set_weights(learner.weights());
//     fibra::rl::Fragment f = sampler.sample(32);
//     fibra::rl::LearnStats s = learner.learn({&f, 1});
//   }
//
// The learner's network lives in libfibra_rl_torch.so, which PpoLearner opens with dlopen (the
// first one made in a process pays libtorch's load: docs/rl.md); rollout workers use Policy and
// never load it. It is looked for at $FIBRA_RL_TORCH_MODULE if set, else where the build tree made
// it, else in the install's libdir.
//
// Determinism: a seed gives the same run for any split of the environment copies over samplers:
// learn() orders the rows of its batch by (global copy index, step) and merges the copies'
// observation moments in that order, whatever order the fragments come in.
#pragma once

#include <fibra/rl/gae.hpp>
#include <fibra/rl/policy.hpp>
#include <fibra/rl/sampler.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fibra::rl {

/// @brief PPO's settings. The defaults are rl-baselines3-zoo's for CartPole-v1 (8 copies x 32 steps
/// a batch, one minibatch of 256, 20 epochs, lambda 0.8, gamma 0.98, learning rate 0.001 and clip
/// range 0.2 both annealed linearly to 0, no entropy bonus) with one change: observations are
/// normalised (the zoo's CartPole does not; CleanRL's continuous PPO does). Over 15 seeds they solve
/// CartPole-v1 in 2,560 to 28,160 steps, against 5,120 to 35,840 without normalisation (docs/rl.md).
struct PpoConfig {
  double gamma = 0.98;
  double gae_lambda = 0.8;
  double clip = 0.2;        ///< the surrogate's clip range (and the value loss's, if clip_vloss)
  bool anneal_clip = true;  ///< clip * (1 - steps / total_steps), as the zoo's lin_0.2
  bool clip_vloss = false;  ///< CleanRL's clipped value loss; Stable-Baselines3's default is off
  double vf_coef = 0.5;     ///< times CleanRL's 0.5 * mean squared error
  double ent_coef = 0.0;
  int epochs = 20;
  int minibatch_size = 256;  ///< rows per gradient step; the last minibatch of an epoch may be smaller
  double max_grad_norm = 0.5;
  double learning_rate = 1e-3;
  bool anneal_lr = true;               ///< learning_rate * (1 - steps / total_steps), before each learn()
  std::int64_t total_steps = 100'000;  ///< the schedules' horizon, in environment steps
  bool norm_adv = true;                ///< normalise advantages per minibatch
  bool normalise_observations = true;  ///< the shared running normaliser (normaliser.hpp)
  /// Rewards divided by the running standard deviation of each copy's discounted return (gamma),
  /// then clipped to +-reward_clip, before GAE or V-trace: Gymnasium's NormalizeReward and
  /// TransformReward as CleanRL's continuous PPO wraps its environments, here in the learner. The
  /// statistics take the copies' steps in order (step, global copy), so a split over workers does
  /// not change them; they go into checkpoints. Returns reported stay the environment's own.
  bool normalise_rewards = false;
  double reward_clip = 10;
  std::optional<double> target_kl;  ///< stop an update's epochs once an epoch's mean approx_kl passes it
  double adam_epsilon = 1e-5;
  std::uint64_t seed = 1;  ///< initial weights, minibatch order, torch's generator
  bool float64 = false;    ///< the learner in double precision (for gradient tests); weights ship as float
};

/// @brief What one learn() did: the loss's parts averaged over its minibatches, before each step.
struct LearnStats {
  double policy_loss = 0, value_loss = 0, entropy = 0, approx_kl = 0, clip_fraction = 0;
  double explained_variance = 0;  ///< 1 - Var(returns - values) / Var(returns), of the batch as sampled
  double learning_rate = 0, clip = 0;
  std::int64_t steps = 0;  ///< environment steps learned from so far, this batch included
  int minibatches = 0;     ///< gradient steps taken in this call
  double seconds = 0;      ///< wall time of this call
};

/// @brief A batch as the loss sees it: rows of normalised observations, actions and what the
/// behaviour policy and GAE gave. PpoLearner::make_batch builds it from fragments.
struct Batch {
  std::int64_t size = 0;
  std::vector<float> observations, actions, logp, advantages, returns, values;
};

/// @brief A named array of a learner's state (for checkpoints: HDF5 datasets named so).
struct NamedArray {
  std::string name;                 ///< e.g. "actor.0.weight", "adam.exp_avg.actor.0.weight", "adam.step"
  std::vector<std::int64_t> shape;  ///< row-major; {} for a scalar
  /// float for the parameters and Adam's moments of a float32 learner, double for a float64
  /// learner and the normaliser, int64 for counters (a generator's state is its bits as int64).
  std::variant<std::vector<float>, std::vector<double>, std::vector<std::int64_t>> values;
};

/// @brief The loss over a batch and its gradient with respect to the flat parameters.
struct LossAndGradient {
  double loss = 0;
  std::vector<double> gradient;  ///< parameter_count(spec) values, the flat layout
};

/// @brief PPO's learner: the policy's parameters, Adam's state and the observation normaliser.
class PpoLearner {
 public:
  /// @brief Initial weights from config.seed (initial_weights()).
  /// @throws ConfigError if the libtorch module cannot be loaded (the message names the paths tried
  /// and the fix) or the spec is invalid.
  PpoLearner(PolicySpec spec, PpoConfig config);
  ~PpoLearner();
  PpoLearner(PpoLearner&&) noexcept;
  PpoLearner& operator=(PpoLearner&&) noexcept;

  const PolicySpec& spec() const;
  const PpoConfig& config() const;

  /// @brief The weights for rollout workers: parameters (as float), normaliser, version.
  PolicyWeights weights() const;
  /// @brief One PPO update from the fragments (each copy's steps once; any order, any split):
  /// GAE, then epochs of minibatch steps; afterwards the fragments' observation moments are merged
  /// into the normaliser and the version goes up by one.
  /// @throws std::invalid_argument for fragments that do not fit the spec or hold nothing.
  LearnStats learn(std::span<const Fragment> fragments);

  /// @brief The batch learn() would build: rows ordered by (global copy index, step), advantages
  /// and returns from GAE with this config's gamma and lambda.
  Batch make_batch(std::span<const Fragment> fragments) const;

  /// @brief An asynchronous learner's update (IMPALA's V-trace, APPO's clipped surrogate): the
  /// fragments may come from older weights (Fragment::policy_version). The learner's present
  /// policy and critic evaluate their rows; V-trace (gae.hpp) corrects for the lag with the
  /// behaviour's log-probabilities, giving the value targets and the policy-gradient advantages;
  /// then `epochs` of PPO's minibatch steps, whose clipped ratio is against the learner's own
  /// policy before this update. The bootstrap values at truncations and after the last step are
  /// the sampler's (its critic saw those observations). Afterwards as learn(): the moments into
  /// the normaliser, the version up by one.
  /// @throws std::invalid_argument as learn(), or for epochs < 1.
  LearnStats learn_vtrace(std::span<const Fragment> fragments, const VtraceConfig& vtrace, int epochs = 1);
  /// @brief The batch learn_vtrace() would build (advantages: V-trace's pg_advantages; returns: vs;
  /// logp and values: the learner's present ones).
  Batch make_vtrace_batch(std::span<const Fragment> fragments, const VtraceConfig& vtrace);
  /// @brief The loss over the whole batch at the current parameters (and current clip range), and
  /// its gradient, not clipped; changes nothing. With config.float64 for finite-difference tests.
  LossAndGradient loss_and_gradient(const Batch& batch);
  /// @brief What the learner's network gives for n rows of normalised observations and actions:
  /// log-probabilities, entropies and values (Policy::evaluate must agree).
  Evaluation evaluate(std::span<const float> observations, std::span<const float> actions);

  /// @brief The flat parameters in double (exact for a float32 learner).
  std::vector<double> parameters() const;
  /// @brief Replaces the flat parameters (Adam's state is kept).
  /// @throws std::invalid_argument for the wrong number of values.
  void set_parameters(std::span<const double> values);

  /// @brief Everything a resumed run needs to continue bit for bit: every parameter block by name
  /// (parameter_layout()), Adam's moments per block and its step, the normaliser, the counters
  /// (steps, version) and the minibatch generator's state.
  std::vector<NamedArray> state() const;
  /// @brief Restores state(). @throws CheckpointError naming the array that is missing or has
  /// another shape or type.
  void load_state(const std::vector<NamedArray>& state);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// @brief How train_ppo_local samples and evaluates.
struct LocalTrainOptions {
  int num_envs = 8;         ///< environment copies (one Sampler)
  int fragment_steps = 32;  ///< steps per copy per update
  int eval_episodes = 100;
  bool eval_greedy = true;     ///< the argmax / mean action, as Stable-Baselines3 evaluates
  std::string torch_module{};  ///< PolicySpec::torch_module: a user's network (empty: the built-in MLPs)
  /// Evaluate every this many environment steps (0: only at the end) and stop once the mean
  /// return reaches stop_at_return.
  std::int64_t eval_every_steps = 0;
  std::optional<double> stop_at_return;
  std::function<void(const LearnStats&, const Fragment&)> on_update;  ///< after every learn()
};

/// @brief What train_ppo_local did.
struct LocalTrainResult {
  std::int64_t steps = 0;  ///< environment steps sampled
  int updates = 0;
  double seconds = 0;  ///< wall time, evaluations included
  double sample_seconds = 0, learn_seconds = 0, eval_seconds = 0;
  EvalResult evaluation;                  ///< the last evaluation
  std::optional<std::int64_t> solved_at;  ///< the steps at the first evaluation >= stop_at_return
  PolicyWeights weights;
};

/// @brief PPO in one process, one Sampler and one PpoLearner, for as many whole updates as fit in
/// config.total_steps environment steps, or until an evaluation reaches options.stop_at_return (the
/// distributed trainer is fibra's actors around the same two classes).
/// @throws ConfigError as PpoLearner and Sampler do.
LocalTrainResult train_ppo_local(std::string_view env_name, const PpoConfig& config,
                                 const LocalTrainOptions& options = {});

}  // namespace fibra::rl
