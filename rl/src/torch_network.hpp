// A user's torch network (PolicySpec::torch_module) as fibra_rl_core sees it: through the learner's
// module (learner_module.hpp), opened when the first such spec is used. Its layout is cached per
// spec, so that Policy and parameter_layout() build the network once per process for it.
#pragma once

#include "learner_module.hpp"

#include <fibra/rl/policy.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace fibra::rl::detail {

/// @brief The shape part of a ModuleSpec for `spec` (the loss's settings left at their defaults).
ModuleSpec network_spec(const PolicySpec& spec, std::uint64_t seed);

/// @brief spec.torch_module's network, for inference, its parameters drawn from `seed`.
/// @throws ConfigError with the module's reason (the library not found, its outputs' shapes...).
std::shared_ptr<NetworkModule> make_network(const PolicySpec& spec, std::uint64_t seed);

/// @brief Its parameters' names and shapes (named_parameters() order).
std::vector<NamedShape> network_layout(const PolicySpec& spec);

}  // namespace fibra::rl::detail
