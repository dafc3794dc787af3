// rl/src/discrete_action.hpp: reading a discrete action from Env::step's span.
#pragma once

#include <cmath>
#include <span>
#include <stdexcept>
#include <string>

namespace fibra::rl::detail {

/// @brief The index a discrete action's span holds: one whole number in [0, n).
/// @throws std::invalid_argument for a span not of one value; std::out_of_range for a value that is
/// not an index of the space.
inline int discrete_action(std::span<const double> action, int n, const char* env) {
  if (action.size() != 1)
    throw std::invalid_argument(std::string(env) + ": a discrete action is one value (the index), got " +
                                std::to_string(action.size()));
  const double a = action[0];
  if (!(a >= 0 && a < n) || a != std::floor(a))
    throw std::out_of_range(std::string(env) + ": action " + std::to_string(a) + " is not one of 0, ..., " +
                            std::to_string(n - 1));
  return static_cast<int>(a);
}

}  // namespace fibra::rl::detail
