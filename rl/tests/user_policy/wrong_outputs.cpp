// A user's network whose value head gives two columns: fibra must refuse it, naming the library and
// the shape it wants.
#include <fibra/rl/torch_policy.hpp>

#include <torch/nn/modules/linear.h>

namespace {

struct TwoValues : fibra::rl::TorchPolicy {
  torch::nn::Linear actor{nullptr}, critic{nullptr};
  explicit TwoValues(const fibra::rl::TorchPolicyShape& s) {
    actor = register_module("actor", torch::nn::Linear(s.observation_size, s.actor_outputs));
    critic = register_module("critic", torch::nn::Linear(s.observation_size, 2));
  }
  fibra::rl::ActorCritic forward(const torch::Tensor& obs) override {
    return {actor->forward(obs), critic->forward(obs)};
  }
};

}  // namespace

FIBRA_RL_TORCH_POLICY([](const fibra::rl::TorchPolicyShape& s) { return std::make_shared<TwoValues>(s); })
