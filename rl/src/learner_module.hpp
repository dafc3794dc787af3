// rl/src/learner_module.hpp: the boundary between fibra_rl and the learner's libtorch module
// (libfibra_rl_torch.so, rl/torch/learner.cpp). Rollout workers and executors run the same binary
// as the learner, and libtorch costs every process that links it 0.7 s and 164 MB at start
// (docs/rl.md), so fibra_rl never links it: PpoLearner dlopens the module when it is made
// (module_loader.cpp) and drives it through the interface below.
//
// The module is the network and its optimiser only: it holds the flat parameters (the layout of
// policy.hpp, which ModuleSpec passes down as offsets, so there is one definition of it), computes the
// PPO loss and its gradient with libtorch's autograd, and steps Adam. Everything else (GAE, batches,
// minibatch order, schedules, the normaliser, checkpoint names) is fibra_rl's, in plain C++.
//
// A user's network (PolicySpec::torch_module, a shared library made with FIBRA_RL_TORCH_POLICY from
// <fibra/rl/torch_policy.hpp>) is opened by the module too: the learner trains it in place of the
// built-in MLPs, and NetworkModule runs its forward pass for rollout workers, which then load
// libtorch (the cost docs/rl.md states) since the user's layers are not fibra's kernels.
//
// Both sides are built together from this header, by one compiler and standard library; the ABI
// number catches a module left over from another build. Data cross as spans and plain structs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fibra::rl::detail {

/// @brief Bumped whenever anything in this header changes.
inline constexpr int learner_module_abi = 2;
/// @brief The module's exported symbols: an extern "C" LearnerFactory and NetworkFactory.
inline constexpr const char* learner_factory_symbol = "fibra_rl_torch_make_learner";
inline constexpr const char* network_factory_symbol = "fibra_rl_torch_make_network";

/// @brief One linear layer's place in the flat parameters: weight (out x in, row-major) at
/// weight_offset, bias (out) at bias_offset.
struct LinearBlock {
  std::int64_t in = 0, out = 0, weight_offset = 0, bias_offset = 0;
};

/// @brief What the module needs to build the network and its loss.
struct ModuleSpec {
  std::int64_t observation_size = 0;
  std::int64_t action_size = 0;    ///< values per action: 1 for discrete, the box's size for Gaussian
  std::int64_t actor_outputs = 0;  ///< the actor's outputs: Discrete::n logits, or the box's size means
  /// A user's network (PolicySpec::torch_module): the shared library's path; then actor, critic
  /// are empty, and the flat parameters are its parameters in named_parameters() order, then the
  /// log std for a Gaussian (at log_std_offset). Empty: the built-in MLPs of actor and critic.
  std::string torch_module;
  std::vector<int> hidden;  ///< PolicySpec::hidden, passed to a user's network as a hint
  bool discrete = true;     ///< categorical head over actor outputs (logits), else a diagonal Gaussian
  bool relu = false;        ///< the hidden activation: relu, else tanh
  bool float64 = false;     ///< parameters, optimiser and loss in double (gradient tests)
  std::vector<LinearBlock> actor, critic;
  std::int64_t log_std_offset = -1;  ///< Gaussian only
  std::int64_t parameter_count = 0;
  // The loss (CleanRL's ppo.py) and Adam (torch.optim.Adam's formula).
  bool norm_adv = true, clip_vloss = false;
  double vf_coef = 0.5, ent_coef = 0.0, max_grad_norm = 0.5;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-5;
  std::uint64_t seed = 0;  ///< torch's own generator: a user's network draws its initial weights from it
};

/// @brief A learn() call's batch; set_batch copies it.
struct BatchView {
  std::int64_t size = 0;
  const float* observations = nullptr;  ///< size x observation_size, normalised
  const float* actions = nullptr;       ///< size x action_size
  const float* logp = nullptr;          ///< the behaviour policy's
  const float* advantages = nullptr;
  const float* returns = nullptr;
  const float* values = nullptr;  ///< the behaviour critic's (for the clipped value loss)
};

/// @brief The loss's parts over one minibatch (before the update that follows).
struct MinibatchStats {
  double loss = 0, policy_loss = 0, value_loss = 0, entropy = 0, approx_kl = 0, clip_fraction = 0;
};

/// @brief The learner inside the module.
class LearnerModule {
 public:
  virtual ~LearnerModule() = default;
  virtual void get_parameters(std::span<double> out) const = 0;
  virtual void set_parameters(std::span<const double> in) = 0;
  /// @brief Adam's first and second moments (flat, as the parameters) and its step count.
  virtual void get_adam(std::span<double> exp_avg, std::span<double> exp_avg_sq, std::int64_t& step) const = 0;
  virtual void set_adam(std::span<const double> exp_avg, std::span<const double> exp_avg_sq, std::int64_t step) = 0;
  /// @brief The batch the next update() and loss_and_gradient() calls index into.
  virtual void set_batch(const BatchView& batch) = 0;
  /// @brief One gradient step on the rows `rows` of the batch: loss, clip the gradient's norm,
  /// Adam with learning rate `lr`; `clip` is the surrogate's (and value loss's) clip range.
  virtual MinibatchStats update(std::span<const std::int64_t> rows, double lr, double clip) = 0;
  /// @brief The loss over `rows` and its gradient (not clipped) into `gradient`; no update.
  virtual MinibatchStats loss_and_gradient(std::span<const std::int64_t> rows, double clip,
                                           std::span<double> gradient) = 0;
  /// @brief For n rows: log-probability of each action, the distribution's entropy, the value.
  virtual void evaluate(std::span<const float> observations, std::span<const float> actions, std::span<double> logp,
                        std::span<double> entropy, std::span<double> values) = 0;
};

/// @brief One parameter tensor of a user's network, as named_parameters() names it.
struct NamedShape {
  std::string name;
  std::vector<std::int64_t> shape;
};

/// @brief A user's network for inference (float32, no autograd) and for its layout and initial
/// values. Not thread-safe; one per Policy.
class NetworkModule {
 public:
  virtual ~NetworkModule() = default;
  /// @brief The network's parameters in named_parameters() order (the log std is not one).
  virtual std::vector<NamedShape> layout() const = 0;
  virtual void get_parameters(std::span<float> out) const = 0;
  virtual void set_parameters(std::span<const float> in) = 0;
  /// @brief For n rows of normalised observations: the actor's outputs (n x actor_outputs) and the
  /// values (n).
  virtual void forward(std::span<const float> observations, std::span<float> actor, std::span<float> values) = 0;
};

/// @brief The factory: a new LearnerModule, or nullptr with a message in `error` (NUL-terminated,
/// at most error_size bytes) if `abi` is not the module's learner_module_abi or building fails.
using LearnerFactory = LearnerModule* (*)(int abi, const ModuleSpec* spec, char* error, std::size_t error_size);
/// @brief A new NetworkModule for spec.torch_module, its parameters drawn as the library's
/// constructors draw them after torch's generator is seeded with spec.seed; or nullptr with a
/// message, as LearnerFactory.
using NetworkFactory = NetworkModule* (*)(int abi, const ModuleSpec* spec, char* error, std::size_t error_size);

/// @brief The module's factories, loaded on first use (module_loader.cpp); the same for the
/// process's life.
/// @throws ConfigError naming every path tried, each with dlerror(), and the fix.
LearnerFactory learner_factory();
NetworkFactory network_factory();

}  // namespace fibra::rl::detail
