// fibra/rl/policy.hpp: the policy network's shape, its weights as one flat array, and inference in
// plain C++ for rollout workers (which never load libtorch for the built-in MLPs).
//
//   auto spec = fibra::rl::PolicySpec::for_env("CartPole-v1");       // 4 -> 64 -> 64 -> 2, tanh
//   fibra::rl::PolicyWeights w = fibra::rl::initial_weights(spec, 1);  // or PpoLearner::weights()
//   fibra::rl::Policy policy(spec, w);
//   std::vector<fibra::rl::Rng> rngs(n, fibra::rl::Rng(7));            // one per environment copy
//   fibra::rl::ActBatch out;
//   policy.act(raw_obs, rngs, out);   // n rows of raw observations -> out.actions, out.logp, out.values
//
// The network is CleanRL's ppo.py / ppo_continuous_action.py: separate actor and critic MLPs with
// the same hidden sizes; a Discrete action space gets a categorical head (the actor's outputs are
// logits), a Box a diagonal Gaussian whose mean is the actor's output and whose log standard
// deviation is a parameter of its own, independent of the state. Or a network of the user's, a
// torch::nn::Module in a shared library of its own (PolicySpec::torch_module, <fibra/rl/torch_policy.hpp>),
// whose forward pass rollout workers then run with libtorch.
//
// The flat layout of PolicyWeights::params, the one both the learner and the workers read: for the
// actor's layers in order, then the critic's, each layer's weight (out x in, row-major, so row j holds
// the input weights of output j), then its bias (out); then, for a Box only, the log standard
// deviation (one value per action component). parameter_layout() names every block as CleanRL's
// nn.Sequential would: actor.0.weight, actor.0.bias, actor.2.weight, ..., critic.4.bias,
// actor_logstd. A user's network: its named_parameters() in order, then actor_logstd for a Box.
#pragma once

#include <fibra/rl/env.hpp>
#include <fibra/rl/normaliser.hpp>
#include <fibra/rl/rng.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fibra::rl {

namespace detail {
class NetworkModule;
}

/// @brief The hidden layers' activation.
enum class Activation { tanh, relu };

/// @brief The shape of a policy: observation size, action space, hidden sizes and activation.
struct PolicySpec {
  int observation_size = 0;
  Space action_space = Discrete{2};
  std::vector<int> hidden{64, 64};  ///< the hidden layers of the actor and of the critic alike
  Activation activation = Activation::tanh;
  /// The absolute path of a shared library made with FIBRA_RL_TORCH_POLICY (torch_policy.hpp):
  /// its network replaces the built-in MLPs (hidden and activation are passed to it as hints), and
  /// every process that runs the policy opens it and libtorch. Empty: the built-in MLPs.
  std::string torch_module{};

  /// @brief The spec for the environment registered as `env_name` (its observation box's size and
  /// its action space).
  /// @throws ConfigError for an unknown name.
  static PolicySpec for_env(std::string_view env_name, std::vector<int> hidden = {64, 64},
                            Activation activation = Activation::tanh);

  /// @brief True for a categorical head (a Discrete action space).
  bool discrete() const { return std::holds_alternative<Discrete>(action_space); }
  /// @brief The actor's outputs: Discrete::n logits, or a Box's size() means.
  int actor_outputs() const;
  /// @brief Doubles per action as the environment takes it: 1 for Discrete, Box::size() for a box.
  int action_size() const { return static_cast<int>(rl::action_size(action_space)); }

  /// @brief Boost.Serialization, for shipping a spec with a job's configuration.
  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/);
};

/// @brief One named block of the flat parameter array (see the header's comment).
struct ParameterBlock {
  std::string name;                  ///< e.g. "actor.0.weight", "critic.4.bias", "actor_logstd"
  std::vector<std::int64_t> shape;   ///< {out, in} for a weight, {out} for a bias or the log std
  std::size_t offset = 0, size = 0;  ///< in values of PolicyWeights::params
};

/// @brief The blocks of `spec`'s flat parameters, in order (they tile [0, parameter_count)).
/// @throws ConfigError for a spec without observations, actions or with a hidden size < 1.
std::vector<ParameterBlock> parameter_layout(const PolicySpec& spec);
/// @brief The number of values in `spec`'s flat parameters.
std::size_t parameter_count(const PolicySpec& spec);

/// @brief What a rollout worker needs of the learner's policy: the flat parameters and the
/// observation normaliser, with the version (the number of learner updates behind them). Plain
/// members, so fibra ships it with Boost.Serialization (include <boost/serialization/vector.hpp>
/// and, for PolicySpec, <boost/serialization/string.hpp> where an archive is written or read).
struct PolicyWeights {
  std::uint64_t version = 0;
  std::vector<float> params;  ///< the flat layout of the header's comment
  ObsNormaliser normaliser;

  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& version& params& normaliser;
  }
};

/// @brief Weights to start from, a function of `seed` alone (drawn with Rng, so the same on every
/// platform): CleanRL's layer_init, orthogonal weights (Gram-Schmidt over normal draws, as torch's
/// orthogonal_) with gain sqrt(2) for hidden layers, 0.01 for the actor's output and 1 for the
/// critic's, zero biases, log std 0; version 0 and a normaliser with no statistics yet. A user's
/// network: what its constructors draw after torch's generator is seeded with `seed`, log std 0.
PolicyWeights initial_weights(const PolicySpec& spec, std::uint64_t seed, bool normalise_observations = true);

/// @brief Policy::act's results for n observation rows.
struct ActBatch {
  std::vector<double> actions;      ///< n x action_size: the index as a double, or the Gaussian's unclipped draw
  std::vector<double> logp;         ///< n: log-probability (density) of each action
  std::vector<double> values;       ///< n: the critic's value
  std::vector<float> observations;  ///< n x observation_size: the normalised observations the networks saw
};

/// @brief log-probabilities, entropies and values of given actions (Policy::evaluate).
struct Evaluation {
  std::vector<double> logp, entropy, values;
};

/// @brief Inference in plain C++ (no libtorch) for rollout workers and evaluation.
///
/// Each row is computed alone, in a fixed order of operations (sums in input order, no fused
/// multiply-add), so its results do not depend on how many rows a batch holds nor on the SIMD
/// width the CPU offers: a fragment is the same whether its environment copies are sampled in one
/// worker or spread over several. (A user's network runs in libtorch: that holds for it only as far
/// as its layers compute each row alone.) Not thread-safe (scratch buffers); one Policy per thread.
class Policy {
 public:
  /// @throws ConfigError if `weights.params` is not parameter_count(spec) long, or the normaliser's
  /// size is not the observation size.
  Policy(PolicySpec spec, const PolicyWeights& weights);
  /// @brief Takes new weights for the same spec (a rollout worker's every iteration): a user's
  /// network is kept, not built again. @throws ConfigError as the constructor.
  void set_weights(const PolicyWeights& weights);

  const PolicySpec& spec() const { return spec_; }
  std::uint64_t version() const { return version_; }

  /// @brief Samples an action for each of n rows of raw observations (n = obs.size() /
  /// observation_size), with rngs[i] for row i: a categorical draw from one uniform, or
  /// mean + std * normal() per component. Fills out.actions, logp (of the unclipped draw; clip it to
  /// the box when stepping), values and observations.
  /// @throws std::invalid_argument for sizes that do not match (rngs.size() must be n).
  void act(std::span<const double> obs, std::span<Rng> rngs, ActBatch& out);
  /// @brief The greedy action (argmax, or the Gaussian's mean) for evaluation; logp and values are
  /// filled as by act().
  void act_greedy(std::span<const double> obs, ActBatch& out);
  /// @brief The critic's value of each of n rows of raw observations.
  void values(std::span<const double> obs, std::vector<double>& out);
  /// @brief The critic's value of already normalised rows (as ActBatch::observations holds).
  void values_normalised(std::span<const float> obs, std::vector<double>& out);
  /// @brief log-probabilities and entropies of `actions` (n x action_size) and the values, for n
  /// rows of raw observations: what the learner computes for the same weights (a test compares).
  void evaluate(std::span<const double> obs, std::span<const double> actions, Evaluation& out);

  /// @brief Normalises n rows of raw observations as this policy's weights say.
  void normalise(std::span<const double> obs, std::span<float> out) const { normaliser_.normalise(obs, out); }

 private:
  struct Layer {
    int in = 0, out = 0;
    std::vector<float> weight_t;  // in x out: the transpose of the flat layout's weight
    std::vector<float> bias;
  };
  std::size_t rows_of(std::span<const double> obs) const;
  void forward(const std::vector<Layer>& net, std::span<const float> x, std::size_t n, std::vector<float>& out);
  void networks(std::span<const float> x, std::size_t n);
  void heads(std::span<const double> obs, ActBatch& out);

  PolicySpec spec_;
  std::uint64_t version_ = 0;
  ObsNormaliser normaliser_;
  std::vector<Layer> actor_, critic_;
  std::vector<float> log_std_;
  // A user's network, in place of actor_ and critic_; a copy of this Policy shares it until either
  // takes new weights (set_weights then builds its own).
  std::shared_ptr<detail::NetworkModule> network_;
  std::vector<float> actor_out_, critic_out_;  // reused between calls
  std::vector<std::vector<float>> hidden_out_;
};

template <class Archive>
void PolicySpec::serialize(Archive& ar, unsigned /*version*/) {
  int kind = discrete() ? 0 : 1;
  ar& observation_size& kind& hidden& activation& torch_module;
  if (kind == 0) {
    if (!discrete()) action_space = Discrete{};
    ar& std::get<Discrete>(action_space).n;
  } else {
    if (discrete()) action_space = Box{};
    Box& box = std::get<Box>(action_space);
    ar& box.shape& box.low& box.high;
  }
}

}  // namespace fibra::rl
