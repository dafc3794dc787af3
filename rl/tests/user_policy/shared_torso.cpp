// A user's policy network for the tests, built as a user builds one: a shared library of its own
// with FIBRA_RL_TORCH_POLICY. Unlike the built-in MLPs (separate actor and critic), one torso
// feeds both heads, and its sizes follow the spec's first hidden size.
#include <fibra/rl/torch_policy.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

namespace {

struct SharedTorso : fibra::rl::TorchPolicy {
  torch::nn::Sequential torso;
  torch::nn::Linear actor{nullptr}, critic{nullptr};

  explicit SharedTorso(const fibra::rl::TorchPolicyShape& s) {
    const int width = s.hidden.empty() ? 64 : s.hidden.front();
    torso =
        register_module("torso", torch::nn::Sequential(torch::nn::Linear(s.observation_size, width), torch::nn::Tanh(),
                                                       torch::nn::Linear(width, width), torch::nn::Tanh()));
    actor = register_module("actor", torch::nn::Linear(width, s.actor_outputs));
    critic = register_module("critic", torch::nn::Linear(width, 1));
  }

  fibra::rl::ActorCritic forward(const torch::Tensor& obs) override {
    const torch::Tensor h = torso->forward(obs);
    return {actor->forward(h), critic->forward(h)};
  }
};

}  // namespace

FIBRA_RL_TORCH_POLICY([](const fibra::rl::TorchPolicyShape& s) { return std::make_shared<SharedTorso>(s); })
