// A user's network (<fibra/rl/torch_policy.hpp>) inside libfibra_rl_torch.so: opening its library,
// building it for a ModuleSpec, and checking what its forward pass gives.
#pragma once

#include "learner_module.hpp"

#include <fibra/rl/torch_policy.hpp>

#include <memory>

namespace fibra::rl::detail {

/// @brief spec.torch_module's network, built after torch's generator is seeded with spec.seed,
/// in double if spec.float64; its forward pass tried once on zeros.
/// @throws std::runtime_error naming the library and what is wrong (not loadable, no
/// FIBRA_RL_TORCH_POLICY, its factory's error, outputs of the wrong shape).
std::shared_ptr<TorchPolicy> load_user_policy(const ModuleSpec& spec);

/// @brief The network's outputs for n rows: the actor's (n x actor_outputs) and the value as (n).
/// @throws std::runtime_error for outputs of another shape, naming the library.
ActorCritic user_forward(TorchPolicy& policy, const ModuleSpec& spec, const torch::Tensor& observations);

}  // namespace fibra::rl::detail
