// rl/src/builtins.hpp: the built-in environments' factories, which the registry holds from its
// first use (not through static registrations, which a static library's linker may drop).
#pragma once

#include <fibra/rl/env.hpp>

#include <memory>

namespace fibra::rl::detail {

/// @brief CartPole-v1: an adapter over jobs/envs' envs::CartPole.
std::unique_ptr<Env> make_cartpole();
/// @brief Acrobot-v1: an adapter over jobs/envs' envs::Acrobot.
std::unique_ptr<Env> make_acrobot();

}  // namespace fibra::rl::detail
