// fibra/rl.hpp: fibra::rl, reinforcement learning on fibra (RLlib's role); docs/rl.md says what
// exists and what is coming. What is where:
//
//   rl/env.hpp         spaces (Box, Discrete), the Env interface, FIBRA_ENV and make_env
//   rl/vector_env.hpp  VectorEnv: N copies stepped together, reset automatically (same-step)
//   rl/pendulum.hpp    Pendulum-v1 (CartPole-v1 and Acrobot-v1 come from make_env)
#pragma once

#include <fibra/rl/env.hpp>
#include <fibra/rl/pendulum.hpp>
#include <fibra/rl/vector_env.hpp>
