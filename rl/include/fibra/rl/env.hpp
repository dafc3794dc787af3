// fibra/rl/env.hpp: environments for fibra::rl, Gymnasium's model in C++: spaces, the Env
// interface, and environments registered by name.
//
//   class Corridor : public fibra::rl::Env {          // a user environment
//     ...                                              // spaces, reset(seed), step(action)
//   };
//   FIBRA_ENV("Corridor-v0", Corridor);                // at namespace scope
//
//   auto env = fibra::rl::make_env("Pendulum-v1");     // or "CartPole-v1", "Acrobot-v1", "Corridor-v0"
//   std::span<const double> obs = env->reset(42);
//   const double torque[] = {0.5};
//   fibra::rl::StepResult r = env->step(torque);      // r.observation, r.reward, r.terminated, r.truncated
//
// Actions are one shape for every space: a span of doubles. For a Box action space it holds the
// box's values (row-major, Box::size() of them); for a Discrete space it holds one value, the index
// as a whole number (1.0 for action 1). One signature serves both kinds, and a batch of actions for
// a VectorEnv is one contiguous array of doubles.
#pragma once

#include <fibra/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fibra::rl {

/// @brief A box of real values: `shape` (row-major), and a lower and upper bound per value
/// (infinite where unbounded), as Gymnasium's spaces.Box.
struct Box {
  std::vector<std::size_t> shape;
  std::vector<double> low, high;  ///< size() values each

  /// @brief The number of values: the product of the shape's extents.
  std::size_t size() const;
};

/// @brief The actions 0, 1, ..., n-1, as Gymnasium's spaces.Discrete(n).
struct Discrete {
  int n = 0;
};

/// @brief An action space: a discrete set or a box. Observation spaces are always boxes.
using Space = std::variant<Discrete, Box>;

/// @brief How many doubles one action of `space` takes: 1 for Discrete, Box::size() for a box.
std::size_t action_size(const Space& space);

/// @brief What one step gave: Gymnasium's (observation, reward, terminated, truncated).
struct StepResult {
  std::span<const double> observation;  ///< the env's own buffer: valid until its next reset or step
  double reward = 0;
  bool terminated = false;  ///< the task's own end (the pole fell, the goal was reached)
  bool truncated = false;   ///< the step limit (Gymnasium's TimeLimit); may come with terminated
};

/// @brief An environment: one episode at a time, deterministic given the seed of its reset.
class Env {
 public:
  virtual ~Env() = default;

  /// @brief The observations' box; the same for the env's whole life.
  virtual Box observation_space() const = 0;
  /// @brief The actions' space; the same for the env's whole life.
  virtual Space action_space() const = 0;
  /// @brief Starts an episode whose start state is a function of `seed` alone; returns its first
  /// observation (the env's buffer, valid until the next reset or step).
  virtual std::span<const double> reset(std::uint64_t seed) = 0;
  /// @brief Advances one step with `action` (see the top of this header for its layout).
  /// @throws std::out_of_range for a discrete action that is not an index of the space;
  /// std::invalid_argument for a span of the wrong size.
  virtual StepResult step(std::span<const double> action) = 0;
};

/// @brief Makes an environment.
using EnvFactory = std::function<std::unique_ptr<Env>()>;

/// @brief Registers `factory` under `name` (FIBRA_ENV calls it).
/// @throws ConfigError if the name is empty or already registered.
void register_env(const std::string& name, EnvFactory factory);

/// @brief A new environment of the registered name ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", or
/// one registered with FIBRA_ENV).
/// @throws ConfigError naming the registered names if none has this name.
std::unique_ptr<Env> make_env(std::string_view name);

/// @brief The registered names, sorted.
std::vector<std::string> env_names();

namespace detail {
template <class T>
bool register_env_class(const char* name) {
  register_env(name, [] { return std::unique_ptr<Env>(std::make_unique<T>()); });
  return true;
}
}  // namespace detail

}  // namespace fibra::rl

#define FIBRA_DETAIL_ENV_CONCAT2(a, b) a##b
#define FIBRA_DETAIL_ENV_CONCAT(a, b) FIBRA_DETAIL_ENV_CONCAT2(a, b)

/// @brief Registers the Env subclass `cls` (default-constructible) under the string `name` for
/// fibra::rl::make_env, at namespace scope: FIBRA_ENV("Corridor-v0", Corridor);
#define FIBRA_ENV(name, cls)                                                                       \
  [[maybe_unused]] static const bool FIBRA_DETAIL_ENV_CONCAT(fibra_env_registered_, __COUNTER__) = \
      ::fibra::rl::detail::register_env_class<cls>(name)
