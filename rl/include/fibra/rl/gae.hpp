// fibra/rl/gae.hpp: advantage estimation, pure functions over arrays (no libtorch): GAE(lambda)
// for PPO, V-trace (Espeholt et al. 2018) for the asynchronous learner.
//
//   fibra::rl::GaeResult g = fibra::rl::gae(fragment, 0.99, 0.95);   // g.advantages, g.returns: [t][i]
//
// Episode ends: where dones[t][i] is set, the value after step t is bootstrap[t][i] (0 if the episode
// terminated; V(final observation) if the step limit truncated it) and nothing flows back from
// step t + 1, which belongs to the next episode. After the last step the value is last_values[i].
#pragma once

#include <fibra/rl/sampler.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace fibra::rl {

/// @brief T steps of N copies, step-major (element t * num_envs + i), as a Fragment holds them.
struct Trajectory {
  int steps = 0, num_envs = 0;
  std::span<const float> rewards;       ///< [t][i]
  std::span<const float> values;        ///< [t][i]: V(x_t)
  std::span<const std::uint8_t> dones;  ///< [t][i]
  std::span<const float> bootstrap;     ///< [t][i]: the value after a done step (0 for a termination)
  std::span<const float> last_values;   ///< [i]: V(x_T)

  /// @brief A fragment's arrays.
  static Trajectory of(const Fragment& f);
};

/// @brief GAE(lambda) (Schulman et al. 2016): delta_t = r_t + gamma V(x_{t+1}) - V(x_t),
/// A_t = delta_t + gamma lambda A_{t+1} (A_{t+1} = 0 across an episode's end); returns A_t + V(x_t).
/// Computed in double. `advantages` and `returns` hold steps * num_envs values.
/// @throws std::invalid_argument for arrays of the wrong sizes.
void gae(const Trajectory& trajectory, double gamma, double lambda, std::span<float> advantages,
         std::span<float> returns);

/// @brief Advantages and returns, [t][i] as the fragment (or the fragments, one after another).
struct GaeResult {
  std::vector<float> advantages, returns;
};
/// @brief gae() over one fragment's arrays.
GaeResult gae(const Fragment& fragment, double gamma, double lambda);
/// @brief gae() over each fragment, the results concatenated in the fragments' order.
GaeResult gae(std::span<const Fragment> fragments, double gamma, double lambda);

/// @brief V-trace's clipping and discount.
struct VtraceConfig {
  double gamma = 0.99;
  double rho_bar = 1.0;     ///< clips the importance weight in the value targets' TD errors
  double c_bar = 1.0;       ///< clips the traces c_t
  double pg_rho_bar = 1.0;  ///< clips the importance weight of the policy-gradient advantage
  double lambda = 1.0;      ///< scales c_t (IMPALA's paper, section 4.2, remark 2)
};

/// @brief V-trace's value targets and policy-gradient advantages, [t][i].
struct VtraceResult {
  std::vector<float> vs;             ///< v_s, the value targets
  std::vector<float> pg_advantages;  ///< rho_s (r_s + gamma v_{s+1} - V(x_s)), rho clipped at pg_rho_bar
};

/// @brief V-trace (Espeholt et al. 2018, eq. 1): with pi/mu = exp(target_logp - behaviour_logp),
/// rho_t = min(rho_bar, pi/mu), c_t = lambda min(c_bar, pi/mu), delta_t = rho_t (r_t + gamma
/// V(x_{t+1}) - V(x_t)), v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1})). `trajectory`'s
/// values are the critic's whose targets these are (PpoLearner::learn_vtrace: the learner's); its
/// bootstrap and last_values are whatever critic saw those observations (learn_vtrace: the
/// sampler's, which alone had them); at an episode's end v_{s+1} is the bootstrap value and the
/// recursion stops; after the last step v_T = V(x_T).
/// Computed in double.
/// @throws std::invalid_argument for arrays of the wrong sizes.
VtraceResult vtrace(const Trajectory& trajectory, std::span<const float> behaviour_logp,
                    std::span<const float> target_logp, const VtraceConfig& config);

}  // namespace fibra::rl
