// GAE(lambda) and V-trace over step-major arrays.
#include <fibra/rl/gae.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace fibra::rl {
namespace {

void check(const Trajectory& tr, std::initializer_list<std::size_t> per_step) {
  const std::size_t rows = static_cast<std::size_t>(tr.steps) * static_cast<std::size_t>(tr.num_envs);
  const bool ok = tr.steps >= 0 && tr.num_envs >= 0 && tr.rewards.size() == rows && tr.values.size() == rows &&
                  tr.dones.size() == rows && tr.bootstrap.size() == rows &&
                  tr.last_values.size() == static_cast<std::size_t>(tr.num_envs) &&
                  std::all_of(per_step.begin(), per_step.end(), [&](std::size_t s) { return s == rows; });
  if (!ok)
    throw std::invalid_argument("fibra::rl: a trajectory of " + std::to_string(tr.steps) + " steps x " +
                                std::to_string(tr.num_envs) + " copies needs " + std::to_string(rows) +
                                " rewards, values, dones and bootstrap values (and outputs), and " +
                                std::to_string(tr.num_envs) + " last values");
}

// The value after step t of copy i: the bootstrap where the episode ended, V(x_{t+1}) otherwise
// (`next` gives it: values[t+1] for GAE, the targets v_{t+1} for V-trace's advantages).
template <class Next>
double value_after(const Trajectory& tr, int t, int i, Next next) {
  const std::size_t k = static_cast<std::size_t>(t) * tr.num_envs + i;
  if (tr.dones[k]) return tr.bootstrap[k];
  if (t + 1 == tr.steps) return tr.last_values[static_cast<std::size_t>(i)];
  return next(k + static_cast<std::size_t>(tr.num_envs));
}

}  // namespace

Trajectory Trajectory::of(const Fragment& f) {
  return {.steps = f.steps,
          .num_envs = f.num_envs,
          .rewards = f.rewards,
          .values = f.values,
          .dones = f.dones,
          .bootstrap = f.bootstrap,
          .last_values = f.last_values};
}

void gae(const Trajectory& tr, double gamma, double lambda, std::span<float> advantages, std::span<float> returns) {
  check(tr, {advantages.size(), returns.size()});
  const auto values = [&](std::size_t k) { return static_cast<double>(tr.values[k]); };
  for (int i = 0; i < tr.num_envs; ++i) {
    double next_advantage = 0;  // A_{t+1}
    for (int t = tr.steps - 1; t >= 0; --t) {
      const std::size_t k = static_cast<std::size_t>(t) * tr.num_envs + i;
      if (tr.dones[k]) next_advantage = 0;
      const double delta = tr.rewards[k] + gamma * value_after(tr, t, i, values) - tr.values[k];
      next_advantage = delta + gamma * lambda * next_advantage;
      advantages[k] = static_cast<float>(next_advantage);
      returns[k] = static_cast<float>(next_advantage + tr.values[k]);
    }
  }
}

GaeResult gae(const Fragment& fragment, double gamma, double lambda) {
  GaeResult r{.advantages = std::vector<float>(fragment.size()), .returns = std::vector<float>(fragment.size())};
  gae(Trajectory::of(fragment), gamma, lambda, r.advantages, r.returns);
  return r;
}

GaeResult gae(std::span<const Fragment> fragments, double gamma, double lambda) {
  GaeResult all;
  for (const Fragment& f : fragments) {
    const GaeResult r = gae(f, gamma, lambda);
    all.advantages.insert(all.advantages.end(), r.advantages.begin(), r.advantages.end());
    all.returns.insert(all.returns.end(), r.returns.begin(), r.returns.end());
  }
  return all;
}

VtraceResult vtrace(const Trajectory& tr, std::span<const float> behaviour_logp, std::span<const float> target_logp,
                    const VtraceConfig& config) {
  check(tr, {behaviour_logp.size(), target_logp.size()});
  const std::size_t rows = tr.rewards.size();
  VtraceResult r{.vs = std::vector<float>(rows), .pg_advantages = std::vector<float>(rows)};
  std::vector<double> vs(rows);
  const auto values = [&](std::size_t k) { return static_cast<double>(tr.values[k]); };
  const auto targets = [&](std::size_t k) { return vs[k]; };
  for (int i = 0; i < tr.num_envs; ++i) {
    double next_correction = 0;  // v_{s+1} - V(x_{s+1})
    for (int t = tr.steps - 1; t >= 0; --t) {
      const std::size_t k = static_cast<std::size_t>(t) * tr.num_envs + i;
      if (tr.dones[k]) next_correction = 0;
      const double ratio = std::exp(static_cast<double>(target_logp[k]) - behaviour_logp[k]);
      const double rho = std::min(config.rho_bar, ratio), c = config.lambda * std::min(config.c_bar, ratio);
      const double delta = rho * (tr.rewards[k] + config.gamma * value_after(tr, t, i, values) - tr.values[k]);
      next_correction = delta + config.gamma * c * next_correction;
      vs[k] = tr.values[k] + next_correction;
    }
    for (int t = 0; t < tr.steps; ++t) {
      const std::size_t k = static_cast<std::size_t>(t) * tr.num_envs + i;
      const double ratio = std::exp(static_cast<double>(target_logp[k]) - behaviour_logp[k]);
      const double pg_rho = std::min(config.pg_rho_bar, ratio);
      r.pg_advantages[k] =
          static_cast<float>(pg_rho * (tr.rewards[k] + config.gamma * value_after(tr, t, i, targets) - tr.values[k]));
      r.vs[k] = static_cast<float>(vs[k]);
    }
  }
  return r;
}

}  // namespace fibra::rl
