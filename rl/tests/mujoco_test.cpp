// The MuJoCo bodies (fibra/rl/mujoco.hpp): their spaces; an episode a function of its seed, bit for
// bit; the rewards, observations and health rules of Gymnasium's v4 recomputed here from the
// engine's state before and after each step; the 1,000-step limit.
#include <fibra/rl/mujoco.hpp>
#include <fibra/rl/rng.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace {

using fibra::rl::Box;
using fibra::rl::MujocoEnv;

std::unique_ptr<MujocoEnv> make(const std::string& name) {
  fibra::rl::register_mujoco_envs();
  fibra::rl::register_mujoco_envs();  // a second call does nothing
  std::unique_ptr<fibra::rl::Env> env = fibra::rl::make_env(name);
  auto* m = dynamic_cast<MujocoEnv*>(env.get());
  EXPECT_NE(m, nullptr) << name << " is not a MujocoEnv";
  env.release();
  return std::unique_ptr<MujocoEnv>(m);
}

// Actions drawn uniformly in the box, from a seed.
std::vector<std::vector<double>> actions(const Box& box, int n, std::uint64_t seed) {
  fibra::rl::Rng rng(seed);
  std::vector<std::vector<double>> out(static_cast<std::size_t>(n));
  for (auto& a : out)
    for (std::size_t i = 0; i < box.size(); ++i) a.push_back(box.low[i] + (box.high[i] - box.low[i]) * rng.uniform());
  return out;
}

// Observations and rewards of an episode from `seed` under `acts` (until it ends).
std::vector<double> episode(MujocoEnv& env, std::uint64_t seed, const std::vector<std::vector<double>>& acts) {
  std::vector<double> trace;
  const auto first = env.reset(seed);
  trace.assign(first.begin(), first.end());
  for (const auto& a : acts) {
    const fibra::rl::StepResult r = env.step(a);
    trace.insert(trace.end(), r.observation.begin(), r.observation.end());
    trace.push_back(r.reward);
    if (r.terminated || r.truncated) break;
  }
  return trace;
}

TEST(Mujoco, HopperSpaces) {
  auto env = make("Hopper-v4");
  EXPECT_EQ(env->observation_space().size(), 11u);
  const Box a = std::get<Box>(env->action_space());
  EXPECT_EQ(a.low, (std::vector<double>{-1, -1, -1}));
  EXPECT_EQ(a.high, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(env->qpos().size(), 6u);   // rootx, rootz, rooty, thigh, leg, foot
  EXPECT_DOUBLE_EQ(env->dt(), 0.008);  // 2 ms x frame skip 4
  const auto obs = env->reset(3);
  EXPECT_EQ(obs.size(), 11u);
  EXPECT_NEAR(obs[0], 1.2, 0.005 + 1e-12);  // the torso's height at rest, plus at most the noise
}

TEST(Mujoco, AnEpisodeIsAFunctionOfItsSeed) {
  for (const std::string name : {"Hopper-v4", "HalfCheetah-v4", "Humanoid-v4"}) {
    auto a = make(name), b = make(name);
    const auto acts = actions(std::get<Box>(a->action_space()), 300, 7);
    const std::vector<double> one = episode(*a, 5, acts);
    EXPECT_EQ(one, episode(*b, 5, acts)) << name << ": two environments, one seed";
    EXPECT_EQ(one, episode(*a, 5, acts)) << name << ": the same environment again (its state reused)";
    EXPECT_NE(one, episode(*a, 6, acts)) << name << ": another seed, the same start";
  }
}

TEST(Mujoco, HopperRewardsObservationsAndHealthByHand) {
  auto env = make("Hopper-v4");
  const auto acts = actions(std::get<Box>(env->action_space()), 400, 11);
  env->reset(1);
  int steps = 0;
  bool ended = false;
  for (const auto& a : acts) {
    const double x_before = env->qpos()[0];
    const fibra::rl::StepResult r = env->step(a);
    ++steps;
    const auto q = env->qpos(), v = env->qvel();
    const double expected = (q[0] - x_before) / 0.008 + 1.0 - 1e-3 * (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
    EXPECT_DOUBLE_EQ(r.reward, expected) << "step " << steps;
    ASSERT_EQ(r.observation.size(), 11u);
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(r.observation[i], q[i + 1]);
    for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(r.observation[5 + i], std::clamp(v[i], -10.0, 10.0));
    bool state_ok = true;
    for (std::size_t i = 2; i < q.size(); ++i) state_ok = state_ok && std::abs(q[i]) < 100;
    for (double x : v) state_ok = state_ok && std::abs(x) < 100;
    const bool healthy = q[1] > 0.7 && std::abs(q[2]) < 0.2 && state_ok;
    EXPECT_EQ(r.terminated, !healthy) << "step " << steps << ": height " << q[1] << ", pitch " << q[2];
    EXPECT_FALSE(r.truncated);
    if (r.terminated) {
      ended = true;
      break;
    }
  }
  EXPECT_TRUE(ended) << "random torques for 400 steps never toppled the hopper: the health rule sees nothing";
  EXPECT_GT(steps, 3);

  // Poses that are unhealthy by each rule alone.
  const std::vector<double> rest(env->qpos().begin(), env->qpos().end());
  const std::vector<double> still(env->qvel().size(), 0.0);
  const std::vector<double> none{0, 0, 0};
  const auto ends_after = [&](std::vector<double> q, std::vector<double> v) {
    env->reset(1);
    env->set_state(q, v);
    return env->step(none).terminated;
  };
  std::vector<double> upright = rest;
  upright[1] = 1.2;
  upright[2] = 0;
  for (std::size_t i = 3; i < upright.size(); ++i) upright[i] = 0;
  EXPECT_FALSE(ends_after(upright, still)) << "the pose at rest is healthy";
  std::vector<double> low = upright;
  low[1] = 0.65;
  EXPECT_TRUE(ends_after(low, still)) << "a torso at 0.65 m (below 0.7)";
  std::vector<double> tilted = upright;
  tilted[2] = 0.3;
  EXPECT_TRUE(ends_after(tilted, still)) << "a pitch of 0.3 (beyond 0.2)";
  std::vector<double> fast = still;
  fast[0] = 150;  // forward, the foot clear of the floor: nothing slows it within a step
  EXPECT_TRUE(ends_after(upright, fast)) << "a velocity beyond 100";
  // A joint's: the knee, at its upper limit (0), turning into its range (to -140 degrees) at 150
  // rad/s, the body in the air; its damping takes about 1 rad/s off within the step.
  std::vector<double> aloft = upright;
  aloft[1] = 1.5;
  std::vector<double> knee = still;
  knee[4] = -150;
  EXPECT_TRUE(ends_after(aloft, knee)) << "a knee velocity beyond 100";
  EXPECT_FALSE(ends_after(aloft, still)) << "the body in the air, still, is healthy";
}

TEST(Mujoco, TheStepLimitIsAThousand) {
  auto env = make("Hopper-v4");
  env->reset(2);
  const std::vector<double> q(env->qpos().begin(), env->qpos().end()), v(env->qvel().size(), 0.0);
  const std::vector<double> none{0, 0, 0};
  fibra::rl::StepResult r;
  for (int i = 0; i < 1000; ++i) {
    env->set_state(q, v);  // kept standing, so that only the limit can end it
    r = env->step(none);
    ASSERT_FALSE(r.terminated) << "step " << i + 1;
    ASSERT_EQ(r.truncated, i + 1 == 1000) << "step " << i + 1;
  }
  env->reset(2);
  EXPECT_EQ(env->steps(), 0);
}

// The half-cheetah never ends but by the limit: random torques for 1,000 steps, each reward
// recomputed from the root's x before and after, each observation from the state.
TEST(Mujoco, HalfCheetahByHand) {
  auto env = make("HalfCheetah-v4");
  EXPECT_EQ(env->observation_space().size(), 17u);
  const Box box = std::get<Box>(env->action_space());
  EXPECT_EQ(box.low, std::vector<double>(6, -1.0));
  EXPECT_EQ(env->qpos().size(), 9u);  // the planar root (3) and six hinges
  EXPECT_DOUBLE_EQ(env->dt(), 0.05);  // 10 ms x frame skip 5
  const auto acts = actions(box, 1000, 17);
  env->reset(9);
  double travelled = env->qpos()[0];
  for (std::size_t i = 0; i < acts.size(); ++i) {
    const double x_before = env->qpos()[0];
    const fibra::rl::StepResult r = env->step(acts[i]);
    double control = 0;
    for (double x : acts[i]) control += x * x;
    EXPECT_DOUBLE_EQ(r.reward, (env->qpos()[0] - x_before) / 0.05 - 0.1 * control) << "step " << i + 1;
    const auto q = env->qpos(), v = env->qvel();
    for (std::size_t k = 0; k < 8; ++k) ASSERT_EQ(r.observation[k], q[k + 1]);
    for (std::size_t k = 0; k < 9; ++k) ASSERT_EQ(r.observation[8 + k], v[k]);
    ASSERT_FALSE(r.terminated) << "step " << i + 1;
    ASSERT_EQ(r.truncated, i + 1 == 1000) << "step " << i + 1;
    ASSERT_TRUE(std::isfinite(q[0]) && std::isfinite(q[1])) << "the simulation diverged at step " << i + 1;
  }
  travelled = env->qpos()[0] - travelled;
  EXPECT_LT(std::abs(travelled), 100.0) << "random torques moved it " << travelled << " m in 50 s";
}

TEST(Mujoco, HumanoidByHand) {
  auto env = make("Humanoid-v4");
  const Box a = std::get<Box>(env->action_space());
  EXPECT_EQ(a.size(), 21u);  // MuJoCo's humanoid: 21 motors, ctrlrange -1..1
  EXPECT_EQ(a.low, std::vector<double>(21, -1.0));
  EXPECT_EQ(env->qpos().size(), 28u);  // a free root (7) and 21 hinges
  EXPECT_EQ(env->qvel().size(), 27u);
  // 26 positions, 27 velocities, then 17 bodies (the world and the model's 16) x (10 + 6 + 6), and
  // 27 actuator forces.
  EXPECT_EQ(env->observation_space().size(), 26u + 27u + 17u * 22u + 27u);
  EXPECT_DOUBLE_EQ(env->dt(), 0.025);  // 5 ms x frame skip 5
  const auto acts = actions(a, 50, 3);
  env->reset(4);
  int steps = 0;
  for (const auto& act : acts) {
    const double before = env->centre_of_mass_x();
    const fibra::rl::StepResult r = env->step(act);
    ++steps;
    double control = 0;
    for (double x : act) control += x * x;
    const auto q = env->qpos();
    EXPECT_EQ(r.terminated, !(q[2] > 1.0 && q[2] < 2.0)) << "step " << steps << ": torso at " << q[2];
    EXPECT_EQ(r.observation.size(), env->observation_space().size());
    for (std::size_t i = 0; i < 26; ++i) EXPECT_EQ(r.observation[i], q[i + 2]);
    // The engine's centre of mass of the whole tree (subtree_com of the world), against the
    // environment's own sum of bodies' masses times their centres.
    const double expected = 1.25 * (env->centre_of_mass_x() - before) / 0.025 + 5.0 - 0.1 * control;
    EXPECT_NEAR(r.reward, expected, 1e-9) << "step " << steps;
    if (r.terminated) break;
  }
  EXPECT_GT(steps, 5);
}

}  // namespace
