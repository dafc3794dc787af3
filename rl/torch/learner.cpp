// libfibra_rl_torch.so: the PPO learner's loss and optimiser on libtorch, and the only file of
// fibra that includes a torch header. fibra_rl opens it with dlopen when a PpoLearner is made
// (learner_module.hpp says why and what crosses the boundary); it exports one extern "C" factory.
//
// The parameters live in one flat tensor in policy.hpp's layout, so the weights that rollout
// workers get are a copy of it, Adam is a handful of whole-tensor operations, and the gradient's
// norm is one. Each network is one autograd function (Mlp) whose forward and backward passes are
// fibra's kernels (rl/src/kernels): Debian's libtorch links the reference BLAS, 10 to 40 times
// slower at these sizes (docs/rl.md has the measurements), and the float forward pass is then the
// workers' to the bit. The heads, the PPO loss, the gradient through them and Adam are libtorch's.
//
// A user's network (ModuleSpec::torch_module, user_policy.hpp) keeps its own parameter tensors:
// flat_ is then their values (in named_parameters() order, then the log std), copied into them
// after every change, and the gradient is theirs gathered into the flat layout, so that Adam, the
// gradient's clipping and the checkpoints are the same code for both.
#include "kernels/mlp.hpp"
#include "learner_module.hpp"
#include "user_policy.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace fibra::rl::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double half_log_2pi = 0.91893853320467274178;  // log(2 pi) / 2

/// One network: its layers' places in the flat parameters and the activation.
struct Net {
  std::vector<LinearBlock> layers;
  bool relu = false;
};

template <class T>
std::vector<Dense<T>> dense_layers(const Net& net, const at::Tensor& flat, const std::vector<at::Tensor>* transposed) {
  std::vector<Dense<T>> out;
  const T* p = flat.data_ptr<T>();
  for (std::size_t l = 0; l < net.layers.size(); ++l) {
    const LinearBlock& b = net.layers[l];
    out.push_back({.in = static_cast<int>(b.in),
                   .out = static_cast<int>(b.out),
                   .weight = p + b.weight_offset,
                   .weight_t = transposed ? (*transposed)[l].template data_ptr<T>() : nullptr,
                   .bias = p + b.bias_offset});
  }
  return out;
}

/// The network's output for rows x, as one autograd node: forward and backward are mlp.hpp's. The
/// gradient goes to the whole flat parameter tensor (zero outside this network's blocks).
struct Mlp : torch::autograd::Function<Mlp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& flat, const Net* net) {
    const at::Tensor xc = x.contiguous();
    const std::int64_t n = xc.size(0);
    std::vector<at::Tensor> transposed, outputs;
    for (const LinearBlock& b : net->layers) {
      transposed.push_back(flat.narrow(0, b.weight_offset, b.out * b.in).view({b.out, b.in}).t().contiguous());
      outputs.push_back(at::empty({n, b.out}, xc.options()));
    }
    if (xc.scalar_type() == at::kDouble)
      run<double>(*net, xc, flat, transposed, outputs);
    else
      run<float>(*net, xc, flat, transposed, outputs);
    variable_list saved{xc, flat};
    saved.insert(saved.end(), outputs.begin(), outputs.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["net"] = reinterpret_cast<std::int64_t>(net);
    return outputs.back();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Net* net = reinterpret_cast<const Net*>(ctx->saved_data["net"].toInt());
    const at::Tensor& x = saved[0];
    const at::Tensor& flat = saved[1];
    const std::vector<at::Tensor> outputs(saved.begin() + 2, saved.end());
    const at::Tensor d_last = grads[0].contiguous();
    at::Tensor grad = at::zeros_like(flat);
    if (x.scalar_type() == at::kDouble)
      back<double>(*net, x, flat, outputs, d_last, grad);
    else
      back<float>(*net, x, flat, outputs, d_last, grad);
    return {at::Tensor(), grad, at::Tensor()};
  }

  template <class T>
  static void run(const Net& net, const at::Tensor& x, const at::Tensor& flat,
                  const std::vector<at::Tensor>& transposed, std::vector<at::Tensor>& outputs) {
    const std::vector<Dense<T>> layers = dense_layers<T>(net, flat, &transposed);
    std::vector<T*> out;
    for (at::Tensor& t : outputs) out.push_back(t.data_ptr<T>());
    mlp_forward<T>(layers, net.relu, static_cast<int>(x.size(0)), x.data_ptr<T>(), out);
  }

  template <class T>
  static void back(const Net& net, const at::Tensor& x, const at::Tensor& flat, const std::vector<at::Tensor>& outputs,
                   const at::Tensor& d_last, at::Tensor& grad) {
    const std::vector<Dense<T>> layers = dense_layers<T>(net, flat, nullptr);
    std::vector<const T*> out;
    for (const at::Tensor& t : outputs) out.push_back(t.data_ptr<T>());
    std::vector<T*> grad_weight, grad_bias;
    for (const LinearBlock& b : net.layers) {
      grad_weight.push_back(grad.data_ptr<T>() + b.weight_offset);
      grad_bias.push_back(grad.data_ptr<T>() + b.bias_offset);
    }
    mlp_backward<T>(layers, net.relu, static_cast<int>(x.size(0)), x.data_ptr<T>(), out, d_last.data_ptr<T>(),
                    grad_weight, grad_bias);
  }
};

class TorchLearner final : public LearnerModule {
 public:
  explicit TorchLearner(const ModuleSpec& spec)
      : spec_(spec),
        dtype_(spec.float64 ? at::kDouble : at::kFloat),
        actor_{.layers = spec.actor, .relu = spec.relu},
        critic_{.layers = spec.critic, .relu = spec.relu} {
    const auto options = at::TensorOptions().dtype(dtype_);
    flat_ = at::zeros({spec_.parameter_count}, options);
    if (spec_.torch_module.empty()) {
      flat_.requires_grad_(true);
    } else {
      user_ = load_user_policy(spec_);
      std::int64_t count = 0;
      for (const at::Tensor& p : user_->parameters()) {
        user_params_.push_back(p);
        count += p.numel();
      }
      if (!spec_.discrete) {
        user_log_std_ = at::zeros({spec_.action_size}, options).requires_grad_(true);
        user_params_.push_back(user_log_std_);
        count += spec_.action_size;
      }
      if (count != spec_.parameter_count)
        throw std::invalid_argument("fibra_rl_torch: the network of " + spec_.torch_module + " has " +
                                    std::to_string(count) + " parameters here and " +
                                    std::to_string(spec_.parameter_count) + " in the caller's layout");
      flat_ = at::cat(flat_values(), 0);
    }
    exp_avg_ = at::zeros({spec_.parameter_count}, options);
    exp_avg_sq_ = at::zeros({spec_.parameter_count}, options);
  }

  void get_parameters(std::span<double> out) const override { copy_out(flat_.detach(), out); }
  void set_parameters(std::span<const double> in) override {
    copy_in(in, flat_);
    to_user_network();
  }
  void get_adam(std::span<double> exp_avg, std::span<double> exp_avg_sq, std::int64_t& step) const override {
    copy_out(exp_avg_, exp_avg);
    copy_out(exp_avg_sq_, exp_avg_sq);
    step = step_;
  }
  void set_adam(std::span<const double> exp_avg, std::span<const double> exp_avg_sq, std::int64_t step) override {
    copy_in(exp_avg, exp_avg_);
    copy_in(exp_avg_sq, exp_avg_sq_);
    step_ = step;
  }

  void set_batch(const BatchView& b) override {
    const std::int64_t n = b.size;
    observations_ = from(b.observations, {n, spec_.observation_size});
    actions_ = from(b.actions, {n, spec_.action_size});
    if (spec_.discrete) actions_ = actions_.to(at::kLong);  // gather's index, converted once a batch
    logp_ = from(b.logp, {n});
    advantages_ = from(b.advantages, {n});
    returns_ = from(b.returns, {n});
    values_ = from(b.values, {n});
  }

  MinibatchStats update(std::span<const std::int64_t> rows, double lr, double clip) override {
    const MinibatchStats stats = backward(rows, clip);
    at::NoGradGuard no_grad;
    at::Tensor g = gradient();
    const double norm = g.norm().item<double>();
    const double coef = spec_.max_grad_norm / (norm + 1e-6);  // torch.nn.utils.clip_grad_norm_
    if (coef < 1.0) g.mul_(coef);
    adam(g, lr);
    return stats;
  }

  MinibatchStats loss_and_gradient(std::span<const std::int64_t> rows, double clip,
                                   std::span<double> gradient) override {
    const MinibatchStats stats = backward(rows, clip);
    copy_out(this->gradient(), gradient);
    return stats;
  }

  void evaluate(std::span<const float> observations, std::span<const float> actions, std::span<double> logp,
                std::span<double> entropy, std::span<double> values) override {
    at::NoGradGuard no_grad;
    const auto n = static_cast<std::int64_t>(logp.size());
    at::Tensor a = from(actions.data(), {n, spec_.action_size});
    if (spec_.discrete) a = a.to(at::kLong);
    const Heads h = heads(from(observations.data(), {n, spec_.observation_size}), a);
    copy_out(h.logp, logp);
    copy_out(h.entropy, entropy);
    copy_out(h.value, values);
  }

 private:
  struct Heads {
    at::Tensor logp, entropy, value;
  };

  at::Tensor from(const float* data, at::IntArrayRef shape) const {
    // from_blob does not write through the pointer; the copy owns its data.
    return at::from_blob(const_cast<float*>(data), shape, at::kFloat).to(dtype_, /*non_blocking=*/false, /*copy=*/true);
  }
  static void copy_out(const at::Tensor& t, std::span<double> out) {
    const at::Tensor d = t.detach().to(at::kDouble).contiguous();
    if (static_cast<std::size_t>(d.numel()) != out.size())
      throw std::invalid_argument("fibra_rl_torch: " + std::to_string(d.numel()) + " values into " +
                                  std::to_string(out.size()));
    std::memcpy(out.data(), d.data_ptr<double>(), out.size() * sizeof(double));
  }
  void copy_in(std::span<const double> in, at::Tensor& t) const {
    if (static_cast<std::size_t>(t.numel()) != in.size())
      throw std::invalid_argument("fibra_rl_torch: " + std::to_string(in.size()) + " values for " +
                                  std::to_string(t.numel()));
    at::NoGradGuard no_grad;
    t.copy_(at::from_blob(const_cast<double*>(in.data()), {t.numel()}, at::kDouble));
  }

  // A user's network: each parameter's values, flat, in flat_'s order.
  std::vector<at::Tensor> flat_values() const {
    std::vector<at::Tensor> parts;
    for (const at::Tensor& p : user_params_) parts.push_back(p.detach().reshape({-1}));
    return parts;
  }
  // flat_ changed: a user's network takes its values.
  void to_user_network() {
    if (!user_) return;
    at::NoGradGuard no_grad;
    std::int64_t offset = 0;
    for (at::Tensor& p : user_params_) {
      p.copy_(flat_.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
  // The gradient of the last backward(), flat.
  at::Tensor gradient() {
    if (!user_) return flat_.mutable_grad();
    std::vector<at::Tensor> parts;
    for (const at::Tensor& p : user_params_)
      parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : at::zeros({p.numel()}, p.options()));
    return at::cat(parts, 0);
  }
  void zero_gradient() {
    if (!user_) {
      if (flat_.grad().defined()) flat_.mutable_grad().zero_();
      return;
    }
    for (at::Tensor& p : user_params_)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }

  Heads heads(const at::Tensor& observations, const at::Tensor& actions) const {
    at::Tensor out, value, log_std;
    if (user_) {
      ActorCritic ac = user_forward(*user_, spec_, observations);
      out = ac.actor;
      value = ac.value;
      log_std = user_log_std_;
    } else {
      out = Mlp::apply(observations, flat_, &actor_);
      value = Mlp::apply(observations, flat_, &critic_).squeeze(1);
      if (!spec_.discrete) log_std = flat_.narrow(0, spec_.log_std_offset, spec_.action_size);
    }
    if (spec_.discrete) {
      const at::Tensor logp_all = at::log_softmax(out, 1);
      const at::Tensor logp = logp_all.gather(1, actions).squeeze(1);
      return {logp, -(logp_all.exp() * logp_all).sum(1), value};
    }
    const at::Tensor z = (actions - out) * (-log_std).exp();
    const at::Tensor logp = (-0.5 * z * z - log_std - half_log_2pi).sum(1);
    const at::Tensor entropy = (0.5 + half_log_2pi + log_std).sum().expand({observations.size(0)});
    return {logp, entropy, value};
  }

  // CleanRL's ppo.py loss over the rows, then backward into flat_.grad().
  MinibatchStats backward(std::span<const std::int64_t> rows, double clip) {
    const at::Tensor idx =
        at::from_blob(const_cast<std::int64_t*>(rows.data()), {static_cast<std::int64_t>(rows.size())}, at::kLong);
    const Heads h = heads(observations_.index_select(0, idx), actions_.index_select(0, idx));
    const at::Tensor old_logp = logp_.index_select(0, idx), returns = returns_.index_select(0, idx);
    at::Tensor adv = advantages_.index_select(0, idx);
    if (spec_.norm_adv && rows.size() > 1) adv = (adv - adv.mean()) / (adv.std() + 1e-8);

    const at::Tensor logratio = h.logp - old_logp, ratio = logratio.exp();
    const at::Tensor pg_loss = at::max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean();
    at::Tensor v_loss;
    if (spec_.clip_vloss) {
      const at::Tensor old_values = values_.index_select(0, idx);
      const at::Tensor clipped = old_values + (h.value - old_values).clamp(-clip, clip);
      v_loss = 0.5 * at::max((h.value - returns).square(), (clipped - returns).square()).mean();
    } else {
      v_loss = 0.5 * (h.value - returns).square().mean();
    }
    const at::Tensor entropy = h.entropy.mean();
    const at::Tensor loss = pg_loss - spec_.ent_coef * entropy + spec_.vf_coef * v_loss;

    zero_gradient();
    loss.backward();

    at::NoGradGuard no_grad;
    MinibatchStats s;
    s.loss = loss.item<double>();
    s.policy_loss = pg_loss.item<double>();
    s.value_loss = v_loss.item<double>();
    s.entropy = entropy.item<double>();
    s.approx_kl = ((ratio - 1) - logratio).mean().item<double>();
    s.clip_fraction = ((ratio - 1).abs() > clip).to(at::kDouble).mean().item<double>();
    return s;
  }

  // torch.optim.Adam's step (1.13, single tensor, no weight decay, no amsgrad) on the flat tensors.
  void adam(const at::Tensor& g, double lr) {
    ++step_;
    exp_avg_.mul_(spec_.adam_beta1).add_(g, 1 - spec_.adam_beta1);
    exp_avg_sq_.mul_(spec_.adam_beta2).addcmul_(g, g, 1 - spec_.adam_beta2);
    const double bias_correction1 = 1 - std::pow(spec_.adam_beta1, static_cast<double>(step_));
    const double bias_correction2 = 1 - std::pow(spec_.adam_beta2, static_cast<double>(step_));
    const at::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bias_correction2)).add_(spec_.adam_epsilon);
    flat_.addcdiv_(exp_avg_, denom, -lr / bias_correction1);
    to_user_network();
  }

  ModuleSpec spec_;
  at::ScalarType dtype_;
  Net actor_, critic_;
  at::Tensor flat_, exp_avg_, exp_avg_sq_;
  std::int64_t step_ = 0;
  std::shared_ptr<TorchPolicy> user_;    // a user's network, or none: the built-in MLPs over flat_
  std::vector<at::Tensor> user_params_;  // its parameters, then user_log_std_ for a Gaussian
  at::Tensor user_log_std_;
  at::Tensor observations_, actions_, logp_, advantages_, returns_, values_;
};

}  // namespace
}  // namespace fibra::rl::detail

extern "C" __attribute__((visibility("default"))) fibra::rl::detail::LearnerModule* fibra_rl_torch_make_learner(
    int abi, const fibra::rl::detail::ModuleSpec* spec, char* error, std::size_t error_size) {
  using namespace fibra::rl::detail;
  return make_in_module(abi, error, error_size, [&]() -> LearnerModule* {
    at::manual_seed(spec->seed);
    return new TorchLearner(*spec);
  });
}
