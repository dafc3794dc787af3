// fibra/rl/mujoco.hpp: simulated bodies on the MuJoCo physics engine (Debian's libmujoco-dev, 2.2),
// as fibra::rl environments with Gymnasium's v4 rules (docs/rl.md, "MuJoCo bodies"):
//
//   Hopper-v4        a one-legged hopper in the plane (the project's own model): 11 observations,
//                    3 torques in [-1, 1], frame skip 4
//   HalfCheetah-v4   a two-legged runner in the plane (the project's own model): 17 observations,
//                    6 torques in [-1, 1], frame skip 5
//   Humanoid-v4      MuJoCo's own humanoid (libmujoco-samples' model/humanoid/humanoid.xml, 21
//                    motors): its positions but the root's x and y, velocities, bodies' inertia
//                    and velocity, actuator forces and contact forces; frame skip 5
//
//   fibra::rl::register_mujoco_envs();             // once, before make_env
//   auto env = fibra::rl::make_env("Hopper-v4");
//
// The target fibra::rl_mujoco exists where CMake found MuJoCo; it links libmujoco (1.6 MB, no
// other heavy library), so the processes of a program that uses it load it at start.
// Each model is compiled once per process and shared, read-only, by every environment of it; each
// environment keeps its own simulation state (mjData) and reuses it across episodes. An episode is
// a function of its reset seed: the start state's noise is drawn with fibra::rl::Rng, and the
// engine runs on one thread.
#pragma once

#include <fibra/rl/env.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace fibra::rl {

/// @brief Registers Hopper-v4, HalfCheetah-v4 and Humanoid-v4 with make_env; calling it again does
/// nothing.
void register_mujoco_envs();

/// @brief What every MuJoCo environment offers beyond Env: its state, for tests and for
/// observation statistics.
class MujocoEnv : public Env {
 public:
  ~MujocoEnv() override;
  /// @brief Joint positions (the model's nq) and velocities (nv) now.
  std::span<const double> qpos() const;
  std::span<const double> qvel() const;
  /// @brief Sets positions and velocities (then recomputes what depends on them), as Gymnasium's
  /// set_state; the episode's step count is left as it is.
  /// @throws std::invalid_argument for spans of the wrong sizes.
  void set_state(std::span<const double> qpos, std::span<const double> qvel);
  /// @brief The x of the whole body's centre of mass, as the engine computed it at the last step
  /// (its position stage, before the last integration: what Gymnasium's mass_center reads). From
  /// MuJoCo's subtree_com, not from the bodies' masses and centres as Humanoid-v4's reward sums
  /// them, so that a test can hold one against the other.
  double centre_of_mass_x() const;
  /// @brief Seconds of simulated time per step: the model's timestep times the frame skip.
  double dt() const;
  /// @brief Steps taken in this episode (Gymnasium's TimeLimit truncates at 1,000).
  int steps() const { return steps_; }
  /// @brief The model's actuators' control ranges: a box of one value per actuator.
  Space action_space() const override;

 protected:
  struct Sim;
  /// @param model_name "hopper", "half_cheetah" or "humanoid" (the model cache's key)
  MujocoEnv(const std::string& model_name, int frame_skip);
  /// @brief Writes the controls (clipped to the actuators' ranges) and steps the engine frame_skip times.
  /// @throws std::invalid_argument for a span that is not one value per actuator.
  void simulate(std::span<const double> action);
  /// @brief simulate(action), and the root's forward velocity over the step: the change of qpos[0]
  /// over dt() (the hopper's and the half-cheetah's reward).
  double simulate_forward(std::span<const double> action);
  /// @brief Starts an episode: the model's initial positions and zero velocities plus noise drawn
  /// from `seed`, uniform in [-scale, scale] (the velocities' `scale` times a normal draw with
  /// `normal_velocities`).
  void start_from(std::uint64_t seed, double scale, bool normal_velocities = false);
  Sim& sim() const { return *sim_; }
  int steps_ = 0;

 private:
  std::unique_ptr<Sim> sim_;
};

}  // namespace fibra::rl
