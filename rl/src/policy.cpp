// PolicySpec, the flat parameter layout, initial weights, and Policy: inference in plain C++.
#include <fibra/rl/policy.hpp>

#include "kernels/mlp.hpp"
#include "torch_network.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace fibra::rl {
namespace {

constexpr double half_log_2pi = 0.91893853320467274178;  // log(2 pi) / 2

void check_spec(const PolicySpec& spec) {
  if (spec.observation_size < 1)
    throw ConfigError("fibra::rl: a PolicySpec needs observation_size >= 1, got " +
                      std::to_string(spec.observation_size));
  if (spec.actor_outputs() < 1) throw ConfigError("fibra::rl: a PolicySpec's action space has no actions");
  for (int h : spec.hidden)
    if (h < 1) throw ConfigError("fibra::rl: a PolicySpec's hidden sizes must be >= 1, got " + std::to_string(h));
}

// Values of the Gaussian's log standard deviation at the end of the flat parameters (0 for Discrete).
std::size_t log_std_size(const PolicySpec& spec) {
  return spec.discrete() ? 0 : static_cast<std::size_t>(spec.actor_outputs());
}

// One MLP's blocks: weight then bias per layer, named as nn.Sequential numbers Linear layers
// between activations (0, 2, 4, ...).
void add_mlp(std::vector<ParameterBlock>& blocks, std::size_t& offset, const std::string& name, int in,
             const std::vector<int>& hidden, int out) {
  std::vector<int> sizes{in};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(out);
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    const std::string prefix = name + "." + std::to_string(2 * l) + ".";
    const auto rows = static_cast<std::size_t>(sizes[l + 1]), cols = static_cast<std::size_t>(sizes[l]);
    blocks.push_back({prefix + "weight", {sizes[l + 1], sizes[l]}, offset, rows * cols});
    offset += rows * cols;
    blocks.push_back({prefix + "bias", {sizes[l + 1]}, offset, rows});
    offset += rows;
  }
}

// torch.nn.init.orthogonal_(gain) over our generator: a (rows x cols) matrix with orthonormal rows
// or columns (whichever are fewer), from modified Gram-Schmidt on normal draws, which gives QR's Q
// with R's diagonal positive, as orthogonal_ makes it.
void orthogonal(Rng& rng, int rows, int cols, double gain, float* out) {
  const int n = std::max(rows, cols), k = std::min(rows, cols);
  std::vector<double> q(static_cast<std::size_t>(n) * k);  // k columns of length n, column-major
  for (double& v : q) v = rng.normal();
  for (int c = 0; c < k; ++c) {
    double* col = q.data() + static_cast<std::size_t>(c) * n;
    for (int p = 0; p < c; ++p) {
      const double* prev = q.data() + static_cast<std::size_t>(p) * n;
      double dot = 0;
      for (int i = 0; i < n; ++i) dot += prev[i] * col[i];
      for (int i = 0; i < n; ++i) col[i] -= dot * prev[i];
    }
    double norm = 0;
    for (int i = 0; i < n; ++i) norm += col[i] * col[i];
    norm = std::sqrt(norm);
    for (int i = 0; i < n; ++i) col[i] /= norm;
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      // rows >= cols: column c of Q is column c of W; else row r of W is column r of Q.
      const double v = rows >= cols ? q[static_cast<std::size_t>(c) * n + r] : q[static_cast<std::size_t>(r) * n + c];
      out[static_cast<std::size_t>(r) * cols + c] = static_cast<float>(gain * v);
    }
}

}  // namespace

PolicySpec PolicySpec::for_env(std::string_view env_name, std::vector<int> hidden, Activation activation) {
  const std::unique_ptr<Env> env = make_env(env_name);
  PolicySpec spec{.observation_size = static_cast<int>(env->observation_space().size()),
                  .action_space = env->action_space(),
                  .hidden = std::move(hidden),
                  .activation = activation};
  check_spec(spec);
  return spec;
}

int PolicySpec::actor_outputs() const {
  if (const Discrete* d = std::get_if<Discrete>(&action_space)) return d->n;
  return static_cast<int>(std::get<Box>(action_space).size());
}

std::vector<ParameterBlock> parameter_layout(const PolicySpec& spec) {
  check_spec(spec);
  std::vector<ParameterBlock> blocks;
  std::size_t offset = 0;
  if (!spec.torch_module.empty()) {
    for (detail::NamedShape& p : detail::network_layout(spec)) {
      std::size_t size = 1;
      for (std::int64_t d : p.shape) size *= static_cast<std::size_t>(d);
      blocks.push_back({std::move(p.name), std::move(p.shape), offset, size});
      offset += size;
    }
  } else {
    add_mlp(blocks, offset, "actor", spec.observation_size, spec.hidden, spec.actor_outputs());
    add_mlp(blocks, offset, "critic", spec.observation_size, spec.hidden, 1);
  }
  if (!spec.discrete())
    blocks.push_back({"actor_logstd", {spec.actor_outputs()}, offset, static_cast<std::size_t>(spec.actor_outputs())});
  return blocks;
}

std::size_t parameter_count(const PolicySpec& spec) {
  const std::vector<ParameterBlock> blocks = parameter_layout(spec);
  return blocks.back().offset + blocks.back().size;
}

PolicyWeights initial_weights(const PolicySpec& spec, std::uint64_t seed, bool normalise_observations) {
  const std::vector<ParameterBlock> blocks = parameter_layout(spec);
  PolicyWeights w{.version = 0,
                  .params = std::vector<float>(blocks.back().offset + blocks.back().size, 0.0f),
                  .normaliser = ObsNormaliser(spec.observation_size, normalise_observations)};
  if (!spec.torch_module.empty()) {
    detail::make_network(spec, seed)
        ->get_parameters(std::span<float>(w.params).first(w.params.size() - log_std_size(spec)));
    return w;
  }
  Rng rng(seed);
  const std::size_t layers = spec.hidden.size() + 1;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const ParameterBlock& block = blocks[b];
    if (block.shape.size() != 2) continue;  // biases and the log std start at 0
    // Blocks come in (weight, bias) pairs: layer l of the actor, then of the critic.
    const std::size_t layer = (b / 2) % layers;
    const bool critic = b / 2 >= layers, last = layer + 1 == layers;
    const double gain = !last ? std::sqrt(2.0) : critic ? 1.0 : 0.01;
    orthogonal(rng, static_cast<int>(block.shape[0]), static_cast<int>(block.shape[1]), gain,
               w.params.data() + block.offset);
  }
  return w;
}

Policy::Policy(PolicySpec spec, const PolicyWeights& weights) : spec_(std::move(spec)) { set_weights(weights); }

void Policy::set_weights(const PolicyWeights& weights) {
  const std::vector<ParameterBlock> blocks = parameter_layout(spec_);
  const std::size_t count = blocks.back().offset + blocks.back().size;
  if (weights.params.size() != count)
    throw ConfigError("fibra::rl: the policy's weights hold " + std::to_string(weights.params.size()) +
                      " values; its spec needs " + std::to_string(count) + " (were they made for another spec?)");
  if (weights.normaliser.size() != spec_.observation_size)
    throw ConfigError("fibra::rl: the policy's normaliser is for observations of " +
                      std::to_string(weights.normaliser.size()) + " values; its spec's are " +
                      std::to_string(spec_.observation_size));
  version_ = weights.version;
  normaliser_ = weights.normaliser;
  const std::size_t log_std = log_std_size(spec_);
  log_std_.assign(weights.params.end() - static_cast<std::ptrdiff_t>(log_std), weights.params.end());
  if (!spec_.torch_module.empty()) {
    // Built once per Policy (a library opened, constructors run); a copy that shares it gets its own.
    if (!network_ || network_.use_count() > 1) network_ = detail::make_network(spec_, 0);
    network_->set_parameters(std::span<const float>(weights.params).first(count - log_std));
    return;
  }
  actor_.clear();
  critic_.clear();
  const std::size_t layers = spec_.hidden.size() + 1;
  for (std::size_t l = 0; l < 2 * layers; ++l) {
    const ParameterBlock& wb = blocks[2 * l];
    const ParameterBlock& bb = blocks[2 * l + 1];
    Layer layer{.in = static_cast<int>(wb.shape[1]), .out = static_cast<int>(wb.shape[0]), .weight_t = {}, .bias = {}};
    layer.weight_t.resize(wb.size);
    const float* src = weights.params.data() + wb.offset;
    for (int o = 0; o < layer.out; ++o)
      for (int i = 0; i < layer.in; ++i)
        layer.weight_t[static_cast<std::size_t>(i) * layer.out + o] = src[static_cast<std::size_t>(o) * layer.in + i];
    layer.bias.assign(weights.params.begin() + static_cast<std::ptrdiff_t>(bb.offset),
                      weights.params.begin() + static_cast<std::ptrdiff_t>(bb.offset + bb.size));
    (l < layers ? actor_ : critic_).push_back(std::move(layer));
  }
}

std::size_t Policy::rows_of(std::span<const double> obs) const {
  const auto d = static_cast<std::size_t>(spec_.observation_size);
  if (obs.size() % d != 0)
    throw std::invalid_argument("fibra::rl: Policy got " + std::to_string(obs.size()) +
                                " observation values, not whole rows of " + std::to_string(d));
  return obs.size() / d;
}

void Policy::forward(const std::vector<Layer>& net, std::span<const float> x, std::size_t n, std::vector<float>& out) {
  std::vector<detail::Dense<float>> layers;
  std::vector<float*> outputs;
  hidden_out_.resize(net.size() - 1);
  for (std::size_t l = 0; l < net.size(); ++l) {
    const Layer& layer = net[l];
    layers.push_back({.in = layer.in,
                      .out = layer.out,
                      .weight = nullptr,
                      .weight_t = layer.weight_t.data(),
                      .bias = layer.bias.data()});
    std::vector<float>& y = l + 1 == net.size() ? out : hidden_out_[l];
    y.resize(n * static_cast<std::size_t>(layer.out));
    outputs.push_back(y.data());
  }
  detail::mlp_forward<float>(layers, spec_.activation == Activation::relu, static_cast<int>(n), x.data(), outputs);
}

// The actor's outputs into actor_out_ (n x actor_outputs) and the values into critic_out_ (n), for n
// normalised rows.
void Policy::networks(std::span<const float> x, std::size_t n) {
  if (network_) {
    actor_out_.resize(n * static_cast<std::size_t>(spec_.actor_outputs()));
    critic_out_.resize(n);
    network_->forward(x, actor_out_, critic_out_);
    return;
  }
  forward(actor_, x, n, actor_out_);
  forward(critic_, x, n, critic_out_);
}

// Normalises, then runs both networks: actor_out_ (n x actor_outputs) and out.values.
void Policy::heads(std::span<const double> obs, ActBatch& out) {
  const std::size_t n = rows_of(obs);
  out.observations.resize(obs.size());
  normaliser_.normalise(obs, out.observations);
  networks(out.observations, n);
  out.values.assign(critic_out_.begin(), critic_out_.end());
  out.logp.resize(n);
  out.actions.resize(n * static_cast<std::size_t>(spec_.action_size()));
}

namespace {

// log softmax of one row of logits, in double.
void log_softmax(const float* logits, int k, std::vector<double>& out) {
  out.resize(static_cast<std::size_t>(k));
  const double top = *std::max_element(logits, logits + k);
  double sum = 0;
  for (int a = 0; a < k; ++a) sum += std::exp(static_cast<double>(logits[a]) - top);
  const double log_sum = top + std::log(sum);
  for (int a = 0; a < k; ++a) out[static_cast<std::size_t>(a)] = static_cast<double>(logits[a]) - log_sum;
}

double gaussian_logp(const float* mean, const std::vector<float>& log_std, const double* action) {
  double logp = 0;
  for (std::size_t i = 0; i < log_std.size(); ++i) {
    const double z = (action[i] - static_cast<double>(mean[i])) / std::exp(static_cast<double>(log_std[i]));
    logp += -0.5 * z * z - static_cast<double>(log_std[i]) - half_log_2pi;
  }
  return logp;
}

}  // namespace

void Policy::act(std::span<const double> obs, std::span<Rng> rngs, ActBatch& out) {
  heads(obs, out);
  const std::size_t n = out.logp.size();
  if (rngs.size() != n)
    throw std::invalid_argument("fibra::rl: Policy::act of " + std::to_string(n) + " rows got " +
                                std::to_string(rngs.size()) + " generators; give one per row");
  const int k = spec_.actor_outputs();
  std::vector<double> logps;
  for (std::size_t r = 0; r < n; ++r) {
    const float* row = actor_out_.data() + r * static_cast<std::size_t>(k);
    if (spec_.discrete()) {
      log_softmax(row, k, logps);
      const double u = rngs[r].uniform();
      int a = 0;
      double cumulative = std::exp(logps[0]);
      while (a + 1 < k && u >= cumulative) cumulative += std::exp(logps[static_cast<std::size_t>(++a)]);
      out.actions[r] = a;
      out.logp[r] = logps[static_cast<std::size_t>(a)];
    } else {
      double* action = out.actions.data() + r * static_cast<std::size_t>(k);
      // Rounded to float, as fragments keep actions, so that the learner's log-probability of the
      // stored action is this one's.
      for (int i = 0; i < k; ++i)
        action[i] =
            static_cast<float>(static_cast<double>(row[i]) +
                               std::exp(static_cast<double>(log_std_[static_cast<std::size_t>(i)])) * rngs[r].normal());
      out.logp[r] = gaussian_logp(row, log_std_, action);
    }
  }
}

void Policy::act_greedy(std::span<const double> obs, ActBatch& out) {
  heads(obs, out);
  const std::size_t n = out.logp.size();
  const int k = spec_.actor_outputs();
  std::vector<double> logps;
  for (std::size_t r = 0; r < n; ++r) {
    const float* row = actor_out_.data() + r * static_cast<std::size_t>(k);
    if (spec_.discrete()) {
      const int a = static_cast<int>(std::max_element(row, row + k) - row);
      log_softmax(row, k, logps);
      out.actions[r] = a;
      out.logp[r] = logps[static_cast<std::size_t>(a)];
    } else {
      double* action = out.actions.data() + r * static_cast<std::size_t>(k);
      for (int i = 0; i < k; ++i) action[i] = row[i];
      out.logp[r] = gaussian_logp(row, log_std_, action);
    }
  }
}

void Policy::values(std::span<const double> obs, std::vector<double>& out) {
  rows_of(obs);  // checks the size
  std::vector<float> normalised(obs.size());
  normaliser_.normalise(obs, normalised);
  values_normalised(normalised, out);
}

void Policy::values_normalised(std::span<const float> obs, std::vector<double>& out) {
  const auto d = static_cast<std::size_t>(spec_.observation_size);
  if (obs.size() % d != 0)
    throw std::invalid_argument("fibra::rl: Policy::values_normalised got " + std::to_string(obs.size()) +
                                " values, not whole rows of " + std::to_string(d));
  if (network_)
    networks(obs, obs.size() / d);  // a user's network gives both outputs in one pass
  else
    forward(critic_, obs, obs.size() / d, critic_out_);
  out.assign(critic_out_.begin(), critic_out_.end());
}

void Policy::evaluate(std::span<const double> obs, std::span<const double> actions, Evaluation& out) {
  ActBatch batch;
  heads(obs, batch);
  const std::size_t n = batch.logp.size();
  const int k = spec_.actor_outputs();
  if (actions.size() != n * static_cast<std::size_t>(spec_.action_size()))
    throw std::invalid_argument("fibra::rl: Policy::evaluate of " + std::to_string(n) + " rows got " +
                                std::to_string(actions.size()) + " action values");
  out.logp.resize(n);
  out.entropy.resize(n);
  out.values = batch.values;
  std::vector<double> logps;
  double gaussian_entropy = 0;
  for (float s : log_std_) gaussian_entropy += 0.5 + half_log_2pi + static_cast<double>(s);
  for (std::size_t r = 0; r < n; ++r) {
    const float* row = actor_out_.data() + r * static_cast<std::size_t>(k);
    if (spec_.discrete()) {
      log_softmax(row, k, logps);
      const auto a = static_cast<std::size_t>(actions[r]);
      if (actions[r] < 0 || a >= logps.size() || static_cast<double>(a) != actions[r])
        throw std::out_of_range("fibra::rl: Policy::evaluate: action " + std::to_string(actions[r]) +
                                " is not an index of Discrete{" + std::to_string(k) + "}");
      out.logp[r] = logps[a];
      double h = 0;
      for (double lp : logps) h -= std::exp(lp) * lp;
      out.entropy[r] = h;
    } else {
      out.logp[r] = gaussian_logp(row, log_std_, actions.data() + r * static_cast<std::size_t>(k));
      out.entropy[r] = gaussian_entropy;
    }
  }
}

}  // namespace fibra::rl
