// fibra/rl.hpp: fibra::rl, reinforcement learning on fibra (RLlib's role); docs/rl.md says what
// exists and what is coming. What is where:
//
//   rl/env.hpp         spaces (Box, Discrete), the Env interface, FIBRA_ENV and make_env
//   rl/vector_env.hpp  VectorEnv: N copies stepped together, reset automatically (same-step)
//   rl/pendulum.hpp    Pendulum-v1 (CartPole-v1 and Acrobot-v1 come from make_env)
//   rl/rng.hpp         Rng: the portable generator every random number comes from
//   rl/normaliser.hpp  ObsMoments, ObsNormaliser: running observation normalisation
//   rl/policy.hpp      PolicySpec, PolicyWeights (flat parameters), Policy: inference without libtorch
//   rl/sampler.hpp     Fragment, Sampler (T steps of M copies), evaluate()
//   rl/gae.hpp         gae() and vtrace(): advantages over fragments, pure functions
//   rl/ppo.hpp         PpoConfig, PpoLearner (libtorch, loaded with dlopen), train_ppo_local()
//   rl/trainer.hpp     PpoTrainer: PPO over rollout workers that are fibra actors (in a Runtime)
#pragma once

#include <fibra/rl/env.hpp>
#include <fibra/rl/gae.hpp>
#include <fibra/rl/normaliser.hpp>
#include <fibra/rl/pendulum.hpp>
#include <fibra/rl/policy.hpp>
#include <fibra/rl/ppo.hpp>
#include <fibra/rl/rng.hpp>
#include <fibra/rl/sampler.hpp>
#include <fibra/rl/trainer.hpp>
#include <fibra/rl/vector_env.hpp>
