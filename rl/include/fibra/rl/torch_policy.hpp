// fibra/rl/torch_policy.hpp: a policy network of your own, a torch::nn::Module, in place of the
// built-in MLPs. Include it in a shared library of its own (not in the program: the program's
// rollout workers and executors would then all pay libtorch's start, docs/rl.md):
//
//   // my_policy.cpp, built as a SHARED library linking ${TORCH_LIBRARIES}
//   #include <fibra/rl/torch_policy.hpp>
//   #include <torch/torch.h>  // the layers (this header brings torch::nn::Module only)
//   struct SharedTorso : fibra::rl::TorchPolicy {
//     torch::nn::Sequential torso;
//     torch::nn::Linear actor{nullptr}, critic{nullptr};
//     explicit SharedTorso(const fibra::rl::TorchPolicyShape& s)
//         : torso(torch::nn::Linear(s.observation_size, 64), torch::nn::Tanh()),
//           actor(torch::nn::Linear(64, s.actor_outputs)), critic(torch::nn::Linear(64, 1)) {
//       register_module("torso", torso);
//       register_module("actor", actor);
//       register_module("critic", critic);
//     }
//     fibra::rl::ActorCritic forward(const torch::Tensor& obs) override {
//       const torch::Tensor h = torso->forward(obs);
//       return {actor->forward(h), critic->forward(h)};
//     }
//   };
//   FIBRA_RL_TORCH_POLICY([](const fibra::rl::TorchPolicyShape& s) { return std::make_shared<SharedTorso>(s); })
//
// and in the program, without any torch header:
//
//   fibra::rl::TrainerOptions o;
//   o.torch_module = "/shared/fs/libmy_policy.so";  // or PolicySpec::torch_module
//
// fibra gives the network rows of normalised observations and takes the actor's outputs (the
// logits of a Discrete action space, or the means of a Box's diagonal Gaussian, whose log standard
// deviation is fibra's own parameter "actor_logstd", independent of the state) and the critic's
// value. Its parameters are the network's named_parameters() in order, flat, then actor_logstd;
// checkpoints name them so. The learner trains it with PPO's loss and Adam; rollout workers run its
// forward pass (in float32, without autograd). The library is opened by path in every process that
// needs it, so the path must be valid on every host (a shared filesystem). The initial weights are
// what the constructors draw after torch's generator is seeded with the run's seed. The network
// runs in training mode everywhere (a dropout layer drops in the workers too), and only its
// parameters travel: a network with buffers (BatchNorm's running statistics) is refused.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace fibra::rl {

/// @brief What a network is built for.
struct TorchPolicyShape {
  int observation_size = 0;  ///< columns of the observation rows
  int actor_outputs = 0;     ///< Discrete{n}: n logits; Box: its size, the means
  bool discrete = true;      ///< a categorical head (else a diagonal Gaussian)
  std::vector<int> hidden;   ///< PolicySpec::hidden, a hint the network may follow
  bool relu = false;         ///< PolicySpec::activation is relu (else tanh), a hint too
};

/// @brief A network's two outputs for n rows: actor (n x actor_outputs), value (n, or n x 1).
struct ActorCritic {
  torch::Tensor actor;
  torch::Tensor value;
};

/// @brief The base of a user's policy network.
class TorchPolicy : public torch::nn::Module {
 public:
  /// @brief For observations (n x observation_size): the actor's outputs and the value.
  virtual ActorCritic forward(const torch::Tensor& observations) = 0;
};

/// @brief Bumped whenever this header changes what crosses into fibra.
inline constexpr int torch_policy_abi = 1;
/// @brief The symbol FIBRA_RL_TORCH_POLICY defines.
inline constexpr const char* torch_policy_symbol = "fibra_rl_torch_policy";

namespace detail {
inline void write_torch_policy_error(char* error, std::size_t size, const std::string& message) {
  if (size == 0) return;
  const std::size_t n = std::min(size - 1, message.size());
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}
}  // namespace detail

}  // namespace fibra::rl

/// @brief Exports a library's network: FACTORY is callable as
/// std::shared_ptr<D>(const fibra::rl::TorchPolicyShape&) for some D derived from TorchPolicy. One
/// per library.
#define FIBRA_RL_TORCH_POLICY(FACTORY)                                                                               \
  extern "C" __attribute__((visibility("default"))) int fibra_rl_torch_policy(                                       \
      int abi, const ::fibra::rl::TorchPolicyShape* shape, std::shared_ptr<::fibra::rl::TorchPolicy>* out,           \
      char* error, std::size_t error_size) {                                                                         \
    if (abi != ::fibra::rl::torch_policy_abi) {                                                                      \
      ::fibra::rl::detail::write_torch_policy_error(                                                                 \
          error, error_size,                                                                                         \
          "it was built against fibra/rl/torch_policy.hpp of ABI " + std::to_string(::fibra::rl::torch_policy_abi) + \
              ", this fibra's is " + std::to_string(abi) + ": rebuild it against this fibra's headers");             \
      return 1;                                                                                                      \
    }                                                                                                                \
    try {                                                                                                            \
      *out = (FACTORY)(*shape);                                                                                      \
      if (!*out) throw std::runtime_error("its factory returned no network");                                        \
      return 0;                                                                                                      \
    } catch (const std::exception& e) {                                                                              \
      ::fibra::rl::detail::write_torch_policy_error(error, error_size, e.what());                                    \
      return 1;                                                                                                      \
    }                                                                                                                \
  }
