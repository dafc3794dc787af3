// A user's network: its library opened by path, built for a spec, checked, and NetworkModule, the
// forward pass for rollout workers (float32, no autograd).
#include "user_policy.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <array>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

namespace fibra::rl::detail {
namespace {

using PolicyFactory = int (*)(int abi, const TorchPolicyShape* shape, std::shared_ptr<TorchPolicy>* out, char* error,
                              std::size_t error_size);

std::string shape_text(const torch::Tensor& t) {
  if (!t.defined()) return "no tensor";
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

PolicyFactory factory_of(const std::string& path) {
  if (path.empty() || path.front() != '/')
    throw std::runtime_error(
        "fibra::rl: PolicySpec::torch_module must be an absolute path (every process opens it, "
        "wherever it runs), got '" +
        path + "'");
  // Never closed, as the learner's module: the network's code must outlive every copy of it.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw std::runtime_error("fibra::rl: cannot open the policy network's library " + path + ": " + dlerror() +
                             "\nTo fix: build it as a shared library linking libtorch (docs/rl.md), on a path every "
                             "host of the run can read");
  void* symbol = dlsym(handle, torch_policy_symbol);
  if (!symbol)
    throw std::runtime_error(
        "fibra::rl: " + path + " has no " + torch_policy_symbol +
        ": define its network with FIBRA_RL_TORCH_POLICY(factory) from <fibra/rl/torch_policy.hpp>");
  return reinterpret_cast<PolicyFactory>(symbol);
}

class UserNetwork final : public NetworkModule {
 public:
  explicit UserNetwork(const ModuleSpec& spec) : spec_(spec), policy_(load_user_policy(spec)) {
    for (const auto& p : policy_->named_parameters()) params_.push_back(p.value());
  }

  std::vector<NamedShape> layout() const override {
    std::vector<NamedShape> out;
    for (const auto& p : policy_->named_parameters())
      out.push_back({p.key(), std::vector<std::int64_t>(p.value().sizes().begin(), p.value().sizes().end())});
    return out;
  }
  void get_parameters(std::span<float> out) const override {
    std::size_t at = 0;
    for (const torch::Tensor& p : params_) {
      const torch::Tensor c = p.detach().to(torch::kFloat).contiguous();
      check_room(at, c.numel(), out.size());
      std::memcpy(out.data() + at, c.data_ptr<float>(), static_cast<std::size_t>(c.numel()) * sizeof(float));
      at += static_cast<std::size_t>(c.numel());
    }
    check_all(at, out.size());
  }
  void set_parameters(std::span<const float> in) override {
    torch::NoGradGuard no_grad;
    std::size_t at = 0;
    for (torch::Tensor& p : params_) {
      check_room(at, p.numel(), in.size());
      p.copy_(torch::from_blob(const_cast<float*>(in.data() + at), p.sizes(), torch::kFloat));
      at += static_cast<std::size_t>(p.numel());
    }
    check_all(at, in.size());
  }
  void forward(std::span<const float> observations, std::span<float> actor, std::span<float> values) override {
    torch::InferenceMode inference;
    const auto n = static_cast<std::int64_t>(values.size());
    const torch::Tensor obs =
        torch::from_blob(const_cast<float*>(observations.data()), {n, spec_.observation_size}, torch::kFloat);
    const ActorCritic out = user_forward(*policy_, spec_, obs);
    const torch::Tensor a = out.actor.to(torch::kFloat).contiguous(), v = out.value.to(torch::kFloat).contiguous();
    std::memcpy(actor.data(), a.data_ptr<float>(), actor.size() * sizeof(float));
    std::memcpy(values.data(), v.data_ptr<float>(), values.size() * sizeof(float));
  }

 private:
  void check_room(std::size_t at, std::int64_t n, std::size_t size) const {
    if (at + static_cast<std::size_t>(n) > size)
      throw std::invalid_argument("fibra::rl: " + std::to_string(size) + " values for the parameters of " +
                                  spec_.torch_module + ", which has more");
  }
  void check_all(std::size_t at, std::size_t size) const {
    if (at != size)
      throw std::invalid_argument("fibra::rl: " + std::to_string(size) + " values for the " + std::to_string(at) +
                                  " parameters of " + spec_.torch_module);
  }

  ModuleSpec spec_;
  std::shared_ptr<TorchPolicy> policy_;
  std::vector<torch::Tensor> params_;
};

}  // namespace

std::shared_ptr<TorchPolicy> load_user_policy(const ModuleSpec& spec) {
  const PolicyFactory factory = factory_of(spec.torch_module);
  const TorchPolicyShape shape{.observation_size = static_cast<int>(spec.observation_size),
                               .actor_outputs = static_cast<int>(spec.actor_outputs),
                               .discrete = spec.discrete,
                               .hidden = spec.hidden,
                               .relu = spec.relu};
  std::shared_ptr<TorchPolicy> policy;
  std::array<char, 1024> error{};
  {
    // The generator is the process's; the initial weights are a function of the seed only if
    // nothing draws between the seeding and the construction.
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    torch::manual_seed(spec.seed);
    if (factory(torch_policy_abi, &shape, &policy, error.data(), error.size()) != 0)
      throw std::runtime_error("fibra::rl: the policy network of " + spec.torch_module +
                               " could not be built: " + error.data());
  }
  if (spec.float64) policy->to(torch::kDouble);
  if (policy->parameters().empty())
    throw std::runtime_error("fibra::rl: the policy network of " + spec.torch_module +
                             " has no parameters (register its layers with register_module)");
  // Only parameters travel to the workers and into checkpoints: state kept in buffers (BatchNorm's
  // running statistics) would differ between the learner and every worker, silently.
  if (const auto buffers = policy->named_buffers(); !buffers.is_empty())
    throw std::runtime_error("fibra::rl: the policy network of " + spec.torch_module + " has buffers (" +
                             buffers.begin()->key() +
                             " ...): fibra ships and saves parameters only, so state kept in buffers (BatchNorm's "
                             "running statistics) would differ between learner and workers; use layers without "
                             "buffers (LayerNorm instead of BatchNorm)");
  torch::NoGradGuard no_grad;
  user_forward(*policy, spec, torch::zeros({2, spec.observation_size}, spec.float64 ? torch::kDouble : torch::kFloat));
  return policy;
}

std::string module_abi_mismatch(int caller_abi) {
  return "it was built for learner module ABI " + std::to_string(learner_module_abi) + ", the caller's is " +
         std::to_string(caller_abi) + " (a module from another build of fibra: rebuild the target fibra_rl_torch)";
}

ActorCritic user_forward(TorchPolicy& policy, const ModuleSpec& spec, const torch::Tensor& observations) {
  ActorCritic out = policy.forward(observations);
  const std::int64_t n = observations.size(0);
  if (!out.actor.defined() || out.actor.dim() != 2 || out.actor.size(0) != n || out.actor.size(1) != spec.actor_outputs)
    throw std::runtime_error("fibra::rl: the policy network of " + spec.torch_module + " gave actor outputs of shape " +
                             shape_text(out.actor) + " for " + std::to_string(n) + " rows; fibra needs [" +
                             std::to_string(n) + ", " + std::to_string(spec.actor_outputs) + "] (" +
                             (spec.discrete ? "the logits" : "the Gaussian's means") + ")");
  if (!out.value.defined() || out.value.numel() != n || (out.value.dim() == 2 && out.value.size(0) != n) ||
      out.value.dim() > 2)
    throw std::runtime_error("fibra::rl: the policy network of " + spec.torch_module + " gave values of shape " +
                             shape_text(out.value) + " for " + std::to_string(n) + " rows; fibra needs [" +
                             std::to_string(n) + "] or [" + std::to_string(n) + ", 1]");
  out.value = out.value.reshape({n});
  return out;
}

}  // namespace fibra::rl::detail

extern "C" __attribute__((visibility("default"))) fibra::rl::detail::NetworkModule* fibra_rl_torch_make_network(
    int abi, const fibra::rl::detail::ModuleSpec* spec, char* error, std::size_t error_size) {
  using namespace fibra::rl::detail;
  return make_in_module(abi, error, error_size, [&]() -> NetworkModule* { return new UserNetwork(*spec); });
}
