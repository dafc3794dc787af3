// A user's network (<fibra/rl/torch_policy.hpp>) inside libfibra_rl_torch.so: opening its library,
// building it for a ModuleSpec, and checking what its forward pass gives.
#pragma once

#include "learner_module.hpp"

#include <fibra/rl/torch_policy.hpp>

#include <ATen/Parallel.h>

#include <memory>
#include <string>

namespace fibra::rl::detail {

/// @brief spec.torch_module's network, built after torch's generator is seeded with spec.seed,
/// in double if spec.float64; its forward pass tried once on zeros.
/// @throws std::runtime_error naming the library and what is wrong (not loadable, no
/// FIBRA_RL_TORCH_POLICY, its factory's error, outputs of the wrong shape).
std::shared_ptr<TorchPolicy> load_user_policy(const ModuleSpec& spec);

/// @brief What both factories say when the caller was built for another learner_module_abi.
std::string module_abi_mismatch(int caller_abi);

/// @brief The body of both extern "C" factories: `make()` (on one torch thread: small networks on
/// a few cores, where threads cost more than they give), or nullptr with the reason in `error`
/// (the ABI's mismatch, or what `make` threw).
template <class Make>
auto make_in_module(int abi, char* error, std::size_t error_size, Make make) -> decltype(make()) {
  if (abi != learner_module_abi) {
    write_torch_policy_error(error, error_size, module_abi_mismatch(abi));
    return nullptr;
  }
  try {
    at::set_num_threads(1);
    return make();
  } catch (const std::exception& e) {
    write_torch_policy_error(error, error_size, e.what());
    return nullptr;
  }
}

/// @brief The network's outputs for n rows: the actor's (n x actor_outputs) and the value as (n).
/// @throws std::runtime_error for outputs of another shape, naming the library.
ActorCritic user_forward(TorchPolicy& policy, const ModuleSpec& spec, const torch::Tensor& observations);

}  // namespace fibra::rl::detail
