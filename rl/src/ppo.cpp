// PpoLearner: batches, minibatch epochs, schedules, the normaliser and checkpoint names, in plain
// C++; the network, loss and Adam in the libtorch module (learner_module.hpp).
#include <fibra/rl/gae.hpp>
#include <fibra/rl/ppo.hpp>

#include "learner_module.hpp"
#include "torch_network.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>

namespace fibra::rl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

detail::ModuleSpec module_spec(const PolicySpec& spec, const PpoConfig& config,
                               const std::vector<ParameterBlock>& layout) {
  detail::ModuleSpec m = detail::network_spec(spec, config.seed);
  m.float64 = config.float64;
  const std::size_t layers = spec.torch_module.empty() ? spec.hidden.size() + 1 : 0;  // a user's: none of ours
  for (std::size_t l = 0; l < 2 * layers; ++l) {
    const ParameterBlock& w = layout[2 * l];
    const ParameterBlock& b = layout[2 * l + 1];
    (l < layers ? m.actor : m.critic)
        .push_back({.in = w.shape[1],
                    .out = w.shape[0],
                    .weight_offset = static_cast<std::int64_t>(w.offset),
                    .bias_offset = static_cast<std::int64_t>(b.offset)});
  }
  if (!spec.discrete()) m.log_std_offset = static_cast<std::int64_t>(layout.back().offset);
  m.parameter_count = static_cast<std::int64_t>(layout.back().offset + layout.back().size);
  m.norm_adv = config.norm_adv;
  m.clip_vloss = config.clip_vloss;
  m.vf_coef = config.vf_coef;
  m.ent_coef = config.ent_coef;
  m.max_grad_norm = config.max_grad_norm;
  m.adam_epsilon = config.adam_epsilon;
  return m;
}

std::unique_ptr<detail::LearnerModule> make_module(const detail::ModuleSpec& spec) {
  const detail::LearnerFactory factory = detail::learner_factory();
  std::array<char, 1024> error{};
  detail::LearnerModule* module = factory(detail::learner_module_abi, &spec, error.data(), error.size());
  if (!module)
    throw ConfigError(std::string("fibra::rl: the libtorch module could not make a learner: ") + error.data());
  return std::unique_ptr<detail::LearnerModule>(module);
}

detail::BatchView view(const Batch& b) {
  return {.size = b.size,
          .observations = b.observations.data(),
          .actions = b.actions.data(),
          .logp = b.logp.data(),
          .advantages = b.advantages.data(),
          .returns = b.returns.data(),
          .values = b.values.data()};
}

void check_fragment(const Fragment& f, const PolicySpec& spec, std::size_t index) {
  const std::size_t rows = f.size();
  const auto d = static_cast<std::size_t>(spec.observation_size), a = static_cast<std::size_t>(spec.action_size());
  const bool ok = f.num_envs >= 1 && f.steps >= 1 && f.observation_size == spec.observation_size &&
                  f.action_size == spec.action_size() && f.observations.size() == rows * d &&
                  f.actions.size() == rows * a && f.logp.size() == rows && f.values.size() == rows &&
                  f.rewards.size() == rows && f.dones.size() == rows && f.bootstrap.size() == rows &&
                  f.last_values.size() == static_cast<std::size_t>(f.num_envs);
  if (!ok)
    throw std::invalid_argument("fibra::rl: fragment " + std::to_string(index) + " (" + std::to_string(f.steps) +
                                " steps x " + std::to_string(f.num_envs) + " copies, observations of " +
                                std::to_string(f.observation_size) + ", actions of " + std::to_string(f.action_size) +
                                ") does not fit the learner's policy or its arrays have the wrong sizes");
}

// Fragments in the order of their first copy's global index (ties keep their order).
std::vector<std::size_t> global_order(std::span<const Fragment> fragments) {
  std::vector<std::size_t> order(fragments.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return fragments[x].first_env < fragments[y].first_env; });
  return order;
}

double variance(const std::vector<double>& x) {
  if (x.empty()) return 0;
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  double s = 0;
  for (double v : x) s += (v - mean) * (v - mean);
  return s / static_cast<double>(x.size());
}

template <class T>
NamedArray array(std::string name, std::vector<std::int64_t> shape, std::vector<T> values) {
  return {.name = std::move(name), .shape = std::move(shape), .values = std::move(values)};
}

}  // namespace

class PpoLearner::Impl {
 public:
  Impl(PolicySpec spec, PpoConfig config)
      : spec_(std::move(spec)),
        config_(config),
        layout_(parameter_layout(spec_)),
        count_(layout_.back().offset + layout_.back().size),
        module_(make_module(module_spec(spec_, config_, layout_))),
        normaliser_(spec_.observation_size, config_.normalise_observations),
        shuffle_(Rng(config_.seed ^ 0x9E3779B97F4A7C15ull).next()) {
    if (config_.epochs < 1 || config_.minibatch_size < 1 || config_.total_steps < 1)
      throw ConfigError("fibra::rl: PpoConfig needs epochs, minibatch_size and total_steps >= 1 (got " +
                        std::to_string(config_.epochs) + ", " + std::to_string(config_.minibatch_size) + ", " +
                        std::to_string(config_.total_steps) + ")");
    const PolicyWeights w = initial_weights(spec_, config_.seed, config_.normalise_observations);
    set_parameters(std::vector<double>(w.params.begin(), w.params.end()));
  }

  PolicySpec spec_;
  PpoConfig config_;
  std::vector<ParameterBlock> layout_;
  std::size_t count_;
  std::unique_ptr<detail::LearnerModule> module_;
  ObsNormaliser normaliser_;
  // PpoConfig::normalise_rewards: each global copy's discounted return so far, and the running
  // mean and variance of every such return seen, starting as Gymnasium's RunningMeanStd does (a
  // count of 1e-4, variance 1: the first rewards are not divided by nothing).
  struct RewardScale {
    std::vector<double> returns;
    double count = 1e-4, mean = 0, var = 1;
    void add(double x) {  // RunningMeanStd's update with a batch of one
      const double delta = x - mean, total = count + 1;
      mean += delta / total;
      var = (var * count + delta * delta * count / total) / total;
      count = total;
    }
  };
  RewardScale reward_scale_;
  Rng shuffle_;  // minibatch order
  std::uint64_t version_ = 0;
  std::int64_t steps_ = 0;

  double remaining() const {
    return std::max(0.0, 1.0 - static_cast<double>(steps_) / static_cast<double>(config_.total_steps));
  }
  double learning_rate() const { return config_.learning_rate * (config_.anneal_lr ? remaining() : 1.0); }
  double clip() const { return config_.clip * (config_.anneal_clip ? remaining() : 1.0); }

  std::vector<double> parameters() const {
    std::vector<double> p(count_);
    module_->get_parameters(p);
    return p;
  }
  void set_parameters(std::span<const double> values) {
    if (values.size() != count_)
      throw std::invalid_argument("fibra::rl: set_parameters got " + std::to_string(values.size()) +
                                  " values; the policy has " + std::to_string(count_));
    module_->set_parameters(values);
  }

  // The rows of `fragments` in global order (copy, step), with each fragment's advantages and
  // returns from `targets` (called once per fragment, in that order: GAE or V-trace) and its
  // old log-probabilities and values from `old` (the behaviour's, or the learner's own).
  template <class Targets>
  Batch gather(std::span<const Fragment> fragments, Targets&& targets) const {
    if (fragments.empty()) throw std::invalid_argument("fibra::rl: learn() needs at least one fragment");
    Batch b;
    const auto d = static_cast<std::size_t>(spec_.observation_size), a = static_cast<std::size_t>(spec_.action_size());
    for (std::size_t i = 0; i < fragments.size(); ++i) {
      check_fragment(fragments[i], spec_, i);
      b.size += static_cast<std::int64_t>(fragments[i].size());
    }
    const auto rows = static_cast<std::size_t>(b.size);
    b.observations.reserve(rows * d);
    b.actions.reserve(rows * a);
    for (auto* v : {&b.logp, &b.advantages, &b.returns, &b.values}) v->reserve(rows);
    for (std::size_t index : global_order(fragments)) {
      const Fragment& f = fragments[index];
      const Targets_t t = targets(f);
      for (int i = 0; i < f.num_envs; ++i)
        for (int s = 0; s < f.steps; ++s) {
          const std::size_t k = static_cast<std::size_t>(s) * f.num_envs + i;
          b.observations.insert(b.observations.end(), f.observations.begin() + k * d,
                                f.observations.begin() + (k + 1) * d);
          b.actions.insert(b.actions.end(), f.actions.begin() + k * a, f.actions.begin() + (k + 1) * a);
          b.logp.push_back(t.logp[k]);
          b.values.push_back(t.values[k]);
          b.advantages.push_back(t.advantages[k]);
          b.returns.push_back(t.returns[k]);
        }
    }
    return b;
  }
  // One fragment's rows as the loss takes them, [t][i].
  struct Targets_t {
    std::span<const float> logp, values, advantages, returns;
    std::vector<float> keep_logp, keep_values, keep_advantages, keep_returns;  // (what the spans view)
  };

  // The fragments' rewards as the loss takes them (one array per fragment, in the fragments'
  // order): with PpoConfig::normalise_rewards, each divided by the standard deviation of the
  // copies' discounted returns so far (`s`, moved on by every step) and clipped; otherwise empty
  // arrays (the fragments' own rewards). The steps go in (step, global copy) order, so any split
  // of the copies gives the same; where several fragments hold the same copies (the asynchronous
  // learner's round may take two calls of a worker), the k-th of them in the fragments' order
  // goes after the (k-1)-th, as they were sampled.
  std::vector<std::vector<float>> scaled_rewards(std::span<const Fragment> fragments, RewardScale& s) const {
    std::vector<std::vector<float>> out(fragments.size());
    if (!config_.normalise_rewards) return out;
    std::vector<int> nth(fragments.size());  // how many earlier fragments hold the same copies
    std::map<int, int> seen;
    int rounds = 0;
    for (std::size_t i = 0; i < fragments.size(); ++i) {
      check_fragment(fragments[i], spec_, i);
      out[i].resize(fragments[i].size());
      nth[i] = seen[fragments[i].first_env]++;
      rounds = std::max(rounds, nth[i] + 1);
    }
    const std::vector<std::size_t> order = global_order(fragments);
    for (int round = 0; round < rounds; ++round) {
      int steps = 0;
      for (std::size_t index : order)
        if (nth[index] == round) steps = std::max(steps, fragments[index].steps);
      for (int t = 0; t < steps; ++t)
        for (std::size_t index : order) {
          const Fragment& f = fragments[index];
          if (nth[index] != round || t >= f.steps) continue;
          for (int c = 0; c < f.num_envs; ++c) {
            const std::size_t k = static_cast<std::size_t>(t) * f.num_envs + c;
            const auto copy = static_cast<std::size_t>(f.first_env + c);
            if (s.returns.size() <= copy) s.returns.resize(copy + 1, 0.0);
            double& g = s.returns[copy];
            g = g * config_.gamma + f.rewards[k];
            s.add(g);
            out[index][k] = static_cast<float>(
                std::clamp(f.rewards[k] / std::sqrt(s.var + 1e-8), -config_.reward_clip, config_.reward_clip));
            if (f.dones[k]) g = 0;  // the next step starts an episode
          }
        }
    }
    return out;
  }

  // `f`'s trajectory with its scaled rewards, if there are any.
  static Trajectory trajectory(const Fragment& f, std::span<const Fragment> fragments,
                               const std::vector<std::vector<float>>& scaled) {
    Trajectory traj = Trajectory::of(f);
    const auto index = static_cast<std::size_t>(&f - fragments.data());
    if (index < scaled.size() && !scaled[index].empty()) traj.rewards = scaled[index];
    return traj;
  }

  Batch make_batch(std::span<const Fragment> fragments) const {
    RewardScale s = reward_scale_;  // (learn() moves the learner's on; this does not)
    return make_batch(fragments, scaled_rewards(fragments, s));
  }

  Batch make_batch(std::span<const Fragment> fragments, const std::vector<std::vector<float>>& scaled) const {
    return gather(fragments, [&](const Fragment& f) {
      Targets_t t;
      t.keep_advantages.resize(f.size());
      t.keep_returns.resize(f.size());
      gae(trajectory(f, fragments, scaled), config_.gamma, config_.gae_lambda, t.keep_advantages, t.keep_returns);
      t.logp = f.logp;
      t.values = f.values;
      t.advantages = t.keep_advantages;
      t.returns = t.keep_returns;
      return t;
    });
  }

  // V-trace's targets with the learner's present policy and critic: the old log-probabilities the
  // clipped surrogate compares with are the learner's own before this update (APPO's), the
  // behaviour's enter through V-trace's importance weights.
  Batch make_vtrace_batch(std::span<const Fragment> fragments, const VtraceConfig& config) {
    RewardScale s = reward_scale_;
    return make_vtrace_batch(fragments, config, scaled_rewards(fragments, s));
  }

  Batch make_vtrace_batch(std::span<const Fragment> fragments, const VtraceConfig& config,
                          const std::vector<std::vector<float>>& scaled) {
    return gather(fragments, [&](const Fragment& f) {
      Targets_t t;
      const Evaluation e = evaluate(f.observations, f.actions);
      t.keep_logp.assign(e.logp.begin(), e.logp.end());
      t.keep_values.assign(e.values.begin(), e.values.end());
      Trajectory traj = trajectory(f, fragments, scaled);
      traj.values = t.keep_values;
      VtraceResult v = vtrace(traj, f.logp, t.keep_logp, config);
      t.keep_advantages = std::move(v.pg_advantages);
      t.keep_returns = std::move(v.vs);
      t.logp = t.keep_logp;
      t.values = t.keep_values;
      t.advantages = t.keep_advantages;
      t.returns = t.keep_returns;
      return t;
    });
  }

  Evaluation evaluate(std::span<const float> observations, std::span<const float> actions) {
    const auto d = static_cast<std::size_t>(spec_.observation_size), a = static_cast<std::size_t>(spec_.action_size());
    const std::size_t n = observations.size() / d;
    if (observations.size() != n * d || actions.size() != n * a)
      throw std::invalid_argument("fibra::rl: PpoLearner::evaluate got " + std::to_string(observations.size()) +
                                  " observation and " + std::to_string(actions.size()) +
                                  " action values, not whole rows of " + std::to_string(d) + " and " +
                                  std::to_string(a));
    Evaluation e{.logp = std::vector<double>(n), .entropy = std::vector<double>(n), .values = std::vector<double>(n)};
    module_->evaluate(observations, actions, e.logp, e.entropy, e.values);
    return e;
  }

  LearnStats learn(std::span<const Fragment> fragments) {
    const Clock::time_point start = Clock::now();
    RewardScale s = reward_scale_;
    const Batch batch = make_batch(fragments, scaled_rewards(fragments, s));
    reward_scale_ = std::move(s);  // (once the fragments were found whole)
    return epochs(batch, fragments, config_.epochs, start);
  }

  LearnStats learn_vtrace(std::span<const Fragment> fragments, const VtraceConfig& vtrace, int epoch_count) {
    const Clock::time_point start = Clock::now();
    RewardScale s = reward_scale_;
    const Batch batch = make_vtrace_batch(fragments, vtrace, scaled_rewards(fragments, s));
    reward_scale_ = std::move(s);
    return epochs(batch, fragments, epoch_count, start);
  }

  // PPO's minibatch epochs over `batch`, then the fragments' moments into the normaliser.
  LearnStats epochs(const Batch& batch, std::span<const Fragment> fragments, int epoch_count, Clock::time_point start) {
    LearnStats stats{.learning_rate = learning_rate(), .clip = clip()};
    module_->set_batch(view(batch));
    std::vector<std::int64_t> order(static_cast<std::size_t>(batch.size));
    std::iota(order.begin(), order.end(), 0);
    const auto minibatch = static_cast<std::size_t>(config_.minibatch_size);
    for (int epoch = 0; epoch < epoch_count; ++epoch) {
      for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[shuffle_.below(i)]);  // Fisher-Yates
      double epoch_kl = 0;
      int epoch_minibatches = 0;
      for (std::size_t first = 0; first < order.size(); first += minibatch) {
        const std::span<const std::int64_t> rows(order.data() + first, std::min(minibatch, order.size() - first));
        const detail::MinibatchStats s = module_->update(rows, stats.learning_rate, stats.clip);
        stats.policy_loss += s.policy_loss;
        stats.value_loss += s.value_loss;
        stats.entropy += s.entropy;
        stats.approx_kl += s.approx_kl;
        stats.clip_fraction += s.clip_fraction;
        epoch_kl += s.approx_kl;
        ++epoch_minibatches;
        ++stats.minibatches;
      }
      if (config_.target_kl && epoch_kl / epoch_minibatches > *config_.target_kl) break;
    }
    for (double* v : {&stats.policy_loss, &stats.value_loss, &stats.entropy, &stats.approx_kl, &stats.clip_fraction})
      *v /= stats.minibatches;
    const std::vector<double> returns(batch.returns.begin(), batch.returns.end());
    std::vector<double> residual(returns.size());
    for (std::size_t i = 0; i < returns.size(); ++i) residual[i] = returns[i] - batch.values[i];
    const double var_returns = variance(returns);
    stats.explained_variance = var_returns == 0 ? std::nan("") : 1.0 - variance(residual) / var_returns;

    // The copies' moments in global order: the same normaliser for any split over samplers.
    for (std::size_t index : global_order(fragments))
      for (const ObsMoments& m : fragments[index].raw_moments) normaliser_.merge(m);
    steps_ += batch.size;
    ++version_;
    stats.steps = steps_;
    stats.seconds = seconds_since(start);
    return stats;
  }

  std::vector<NamedArray> state() const {
    std::vector<double> params(count_), exp_avg(count_), exp_avg_sq(count_);
    std::int64_t step = 0;
    module_->get_parameters(params);
    module_->get_adam(exp_avg, exp_avg_sq, step);
    std::vector<NamedArray> out;
    const auto block = [&](const std::string& name, const ParameterBlock& b, const std::vector<double>& flat) {
      std::vector<double> v(flat.begin() + static_cast<std::ptrdiff_t>(b.offset),
                            flat.begin() + static_cast<std::ptrdiff_t>(b.offset + b.size));
      if (config_.float64)
        out.push_back(array(name, b.shape, std::move(v)));
      else
        out.push_back(array(name, b.shape, std::vector<float>(v.begin(), v.end())));
    };
    for (const ParameterBlock& b : layout_) block(b.name, b, params);
    for (const ParameterBlock& b : layout_) block("adam.exp_avg." + b.name, b, exp_avg);
    for (const ParameterBlock& b : layout_) block("adam.exp_avg_sq." + b.name, b, exp_avg_sq);
    out.push_back(array<std::int64_t>("adam.step", {}, {step}));
    const ObsMoments& m = normaliser_.moments();
    const std::int64_t d = spec_.observation_size;
    out.push_back(array<std::int64_t>("normaliser.count", {}, {static_cast<std::int64_t>(m.count)}));
    out.push_back(array("normaliser.mean", {d}, m.mean));
    out.push_back(array("normaliser.m2", {d}, m.m2));
    if (config_.normalise_rewards) {
      const RewardScale& r = reward_scale_;
      out.push_back(array("reward_normaliser.returns", {static_cast<std::int64_t>(r.returns.size())}, r.returns));
      out.push_back(array<double>("reward_normaliser.count_mean_var", {3}, {r.count, r.mean, r.var}));
    }
    out.push_back(array<std::int64_t>("learner.steps", {}, {steps_}));
    out.push_back(array<std::int64_t>("learner.version", {}, {static_cast<std::int64_t>(version_)}));
    out.push_back(array<std::int64_t>("learner.shuffle_rng", {}, {std::bit_cast<std::int64_t>(shuffle_.state())}));
    return out;
  }

  void load_state(const std::vector<NamedArray>& state) {
    std::map<std::string, const NamedArray*> by_name;
    for (const NamedArray& a : state) by_name[a.name] = &a;
    const auto find = [&](const std::string& name, const std::vector<std::int64_t>& shape) -> const NamedArray& {
      const auto it = by_name.find(name);
      if (it == by_name.end()) throw CheckpointError("fibra::rl: the learner's state has no array '" + name + "'");
      if (it->second->shape != shape) {
        std::string want, got;
        for (std::int64_t s : shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
        for (std::int64_t s : it->second->shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
        throw CheckpointError("fibra::rl: the learner's state array '" + name + "' has shape [" + got +
                              "]; this learner's is [" + want + "] (a checkpoint of another policy?)");
      }
      return *it->second;
    };
    const auto doubles = [&](const NamedArray& a) -> std::vector<double> {
      if (const auto* f = std::get_if<std::vector<float>>(&a.values)) return {f->begin(), f->end()};
      if (const auto* v = std::get_if<std::vector<double>>(&a.values)) return *v;
      throw CheckpointError("fibra::rl: the learner's state array '" + a.name + "' holds integers, not real values");
    };
    const auto integer = [&](const std::string& name) -> std::int64_t {
      const NamedArray& a = find(name, {});
      const auto* v = std::get_if<std::vector<std::int64_t>>(&a.values);
      if (!v || v->size() != 1)
        throw CheckpointError("fibra::rl: the learner's state array '" + name + "' is not one integer");
      return v->front();
    };
    const auto flat = [&](const std::string& prefix) {
      std::vector<double> out(count_);
      for (const ParameterBlock& b : layout_) {
        const std::vector<double> v = doubles(find(prefix + b.name, b.shape));
        if (v.size() != b.size)
          throw CheckpointError("fibra::rl: the learner's state array '" + prefix + b.name + "' has the wrong size");
        std::copy(v.begin(), v.end(), out.begin() + static_cast<std::ptrdiff_t>(b.offset));
      }
      return out;
    };
    const std::vector<double> params = flat(""), exp_avg = flat("adam.exp_avg."), exp_avg_sq = flat("adam.exp_avg_sq.");
    const std::int64_t d = spec_.observation_size;
    ObsMoments m(spec_.observation_size);
    m.count = static_cast<std::uint64_t>(integer("normaliser.count"));
    m.mean = doubles(find("normaliser.mean", {d}));
    m.m2 = doubles(find("normaliser.m2", {d}));
    const std::int64_t step = integer("adam.step"), steps = integer("learner.steps"),
                       version = integer("learner.version");
    const std::int64_t rng = integer("learner.shuffle_rng");
    RewardScale rewards;
    if (config_.normalise_rewards) {
      const auto it = by_name.find("reward_normaliser.returns");
      if (it == by_name.end() || it->second->shape.size() != 1)
        throw CheckpointError(
            "fibra::rl: the learner's state has no array 'reward_normaliser.returns' (a checkpoint of a run "
            "without reward normalisation?)");
      rewards.returns = doubles(*it->second);
      const std::vector<double> moments = doubles(find("reward_normaliser.count_mean_var", {3}));
      rewards.count = moments[0];
      rewards.mean = moments[1];
      rewards.var = moments[2];
    }
    // Everything read and checked: now change the learner.
    module_->set_parameters(params);
    module_->set_adam(exp_avg, exp_avg_sq, step);
    normaliser_.set_moments(std::move(m));
    steps_ = steps;
    version_ = static_cast<std::uint64_t>(version);
    shuffle_ = Rng(std::bit_cast<std::uint64_t>(rng));
    reward_scale_ = std::move(rewards);
  }
};

PpoLearner::PpoLearner(PolicySpec spec, PpoConfig config) : impl_(std::make_unique<Impl>(std::move(spec), config)) {}
PpoLearner::~PpoLearner() = default;
PpoLearner::PpoLearner(PpoLearner&&) noexcept = default;
PpoLearner& PpoLearner::operator=(PpoLearner&&) noexcept = default;

const PolicySpec& PpoLearner::spec() const { return impl_->spec_; }
const PpoConfig& PpoLearner::config() const { return impl_->config_; }

PolicyWeights PpoLearner::weights() const {
  const std::vector<double> p = impl_->parameters();
  return {
      .version = impl_->version_, .params = std::vector<float>(p.begin(), p.end()), .normaliser = impl_->normaliser_};
}

LearnStats PpoLearner::learn(std::span<const Fragment> fragments) { return impl_->learn(fragments); }
LearnStats PpoLearner::learn_vtrace(std::span<const Fragment> fragments, const VtraceConfig& vtrace, int epochs) {
  if (epochs < 1) throw std::invalid_argument("fibra::rl: learn_vtrace needs epochs >= 1");
  return impl_->learn_vtrace(fragments, vtrace, epochs);
}
Batch PpoLearner::make_vtrace_batch(std::span<const Fragment> fragments, const VtraceConfig& vtrace) {
  return impl_->make_vtrace_batch(fragments, vtrace);
}
Batch PpoLearner::make_batch(std::span<const Fragment> fragments) const { return impl_->make_batch(fragments); }

LossAndGradient PpoLearner::loss_and_gradient(const Batch& batch) {
  impl_->module_->set_batch(view(batch));
  std::vector<std::int64_t> rows(static_cast<std::size_t>(batch.size));
  std::iota(rows.begin(), rows.end(), 0);
  LossAndGradient out{.loss = 0, .gradient = std::vector<double>(impl_->count_)};
  out.loss = impl_->module_->loss_and_gradient(rows, impl_->clip(), out.gradient).loss;
  return out;
}

Evaluation PpoLearner::evaluate(std::span<const float> observations, std::span<const float> actions) {
  return impl_->evaluate(observations, actions);
}

std::vector<double> PpoLearner::parameters() const { return impl_->parameters(); }
void PpoLearner::set_parameters(std::span<const double> values) { impl_->set_parameters(values); }
std::vector<NamedArray> PpoLearner::state() const { return impl_->state(); }
void PpoLearner::load_state(const std::vector<NamedArray>& state) { impl_->load_state(state); }

LocalTrainResult train_ppo_local(std::string_view env_name, const PpoConfig& config, const LocalTrainOptions& options) {
  const Clock::time_point start = Clock::now();
  PolicySpec spec = PolicySpec::for_env(env_name);
  spec.torch_module = options.torch_module;
  PpoLearner learner(spec, config);
  Sampler sampler(std::string(env_name), options.num_envs, 0, config.seed, spec);
  const std::uint64_t eval_seed = Rng(config.seed ^ 0xE7A1'0000'0000'0000ull).next();
  LocalTrainResult result;
  const auto run_evaluation = [&] {
    const Clock::time_point t = Clock::now();
    result.evaluation =
        evaluate(env_name, spec, learner.weights(), options.eval_episodes, eval_seed, options.eval_greedy);
    result.eval_seconds += seconds_since(t);
    if (options.stop_at_return && !result.solved_at && result.evaluation.mean >= *options.stop_at_return)
      result.solved_at = result.steps;
  };
  std::int64_t next_eval = options.eval_every_steps;
  bool evaluated_last = false;
  const auto batch = static_cast<std::int64_t>(options.num_envs) * options.fragment_steps;
  while (result.steps + batch <= config.total_steps) {  // never past the budget
    Clock::time_point t = Clock::now();
    sampler.set_weights(learner.weights());
    const Fragment fragment = sampler.sample(options.fragment_steps);
    result.sample_seconds += seconds_since(t);
    t = Clock::now();
    const LearnStats stats = learner.learn({&fragment, 1});
    result.learn_seconds += seconds_since(t);
    result.steps += static_cast<std::int64_t>(fragment.size());
    ++result.updates;
    if (options.on_update) options.on_update(stats, fragment);
    evaluated_last = false;
    if (options.eval_every_steps > 0 && result.steps >= next_eval) {
      next_eval += options.eval_every_steps;
      run_evaluation();
      evaluated_last = true;
      if (result.solved_at) break;
    }
  }
  if (!evaluated_last) run_evaluation();
  result.weights = learner.weights();
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace fibra::rl
