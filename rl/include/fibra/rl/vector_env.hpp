// fibra/rl/vector_env.hpp: N copies of an environment stepped together, each reset automatically
// when its episode ends.
//
//   fibra::rl::VectorEnv envs("CartPole-v1", 8);
//   std::span<const double> obs = envs.reset(7);            // 8 rows of 4 values
//   std::vector<double> actions(8, 1.0);                     // one action per copy (rows of action_size)
//   const fibra::rl::VectorStep& s = envs.step(actions);    // s.observations, s.rewards, s.terminated, ...
//
// Autoreset is Gymnasium's SAME-STEP mode (gymnasium.vector.AutoresetMode.SAME_STEP, also what
// Stable-Baselines3's VecEnv does): when copy i's episode ends in a step (terminated or truncated),
// that same step resets it, `observations` row i is the new episode's first observation, and the
// ended episode's last observation is in `final_observations` row i (for bootstrapping a truncated
// episode's value). Every step takes an action for every copy; none is ignored, so a fragment of T
// steps holds T * N transitions.
//
// Seeds: reset(seed) gives copy i the seed s_i, the i-th draw (from 0) of envs::SplitMix64(seed);
// copy i's episode k (0 from that reset) starts from Env::reset(SplitMix64(s_i + k).next()). So
// every episode of every copy has its own seed, and the whole sequence is a function of `seed`.
#pragma once

#include <fibra/rl/env.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace fibra::rl {

/// @brief What one VectorEnv::step gave, a row per copy (spans into the VectorEnv, valid until its
/// next reset or step).
struct VectorStep {
  std::span<const double> observations;        ///< size() x obs_size; a new episode's first where it ended
  std::span<const double> final_observations;  ///< size() x obs_size; meaningful only where an episode ended
  std::span<const double> rewards;             ///< size()
  std::span<const std::uint8_t> terminated;    ///< size(), 0 or 1
  std::span<const std::uint8_t> truncated;     ///< size(), 0 or 1
};

/// @brief N environments of one kind, stepped in order on the calling thread.
class VectorEnv {
 public:
  /// @brief `num_envs` copies of the environment registered as `name`.
  /// @throws ConfigError for an unknown name or num_envs < 1.
  VectorEnv(std::string_view name, int num_envs);
  /// @brief Takes copies made elsewhere; they must have equal spaces.
  /// @throws ConfigError if `envs` is empty, holds a null pointer, or their spaces differ.
  explicit VectorEnv(std::vector<std::unique_ptr<Env>> envs);

  /// @brief The number of copies.
  int size() const { return static_cast<int>(envs_.size()); }
  const Box& observation_space() const { return observation_space_; }
  const Space& action_space() const { return action_space_; }
  std::size_t obs_size() const { return obs_size_; }
  std::size_t action_size() const { return action_size_; }

  /// @brief Starts an episode in every copy (seeds as in the header's comment); returns the first
  /// observations, size() rows of obs_size().
  std::span<const double> reset(std::uint64_t seed);
  /// @brief Steps every copy with its row of `actions` (size() rows of action_size()), resetting
  /// those whose episode ends.
  /// @throws std::logic_error before the first reset; std::invalid_argument for a wrong size.
  const VectorStep& step(std::span<const double> actions);
  /// @brief The seed each copy's current episode was reset with.
  std::span<const std::uint64_t> episode_seeds() const { return episode_seeds_; }

 private:
  std::vector<std::unique_ptr<Env>> envs_;
  Box observation_space_;
  Space action_space_;
  std::size_t obs_size_ = 0, action_size_ = 0;
  std::vector<std::uint64_t> copy_seeds_;     // s_i of the header's comment
  std::vector<std::uint64_t> episodes_;       // each copy's episodes since reset(seed), less one
  std::vector<std::uint64_t> episode_seeds_;  // the seed of each copy's current episode
  std::vector<double> obs_, final_obs_, rewards_;
  std::vector<std::uint8_t> terminated_, truncated_;
  VectorStep step_;
  bool started_ = false;
};

}  // namespace fibra::rl
