// jobs/es/es_core.hpp: the pieces of OpenAI's evolution strategy (Salimans et al. 2017) that the
// driver and the workers share: the noise table, the policy, an episode, centred ranks and Adam.
// No MPI and no fibra here: tests and the Python peer's checks can use it in one process.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "envs.hpp"

namespace es {

/// The run's generator: jobs/envs' splitmix64 (portable: the same seed gives the same numbers on
/// every machine and standard library, so a run's curve depends on its seed alone), with normal
/// draws on top.
class Random : public envs::SplitMix64 {
 public:
  using envs::SplitMix64::SplitMix64;
  double normal() {  // Box-Muller
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
  }
};

/// A number that depends on its inputs alone (a seed per generation, pair or episode).
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  return Random(a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL) ^ (c << 32 | c >> 32)).next();
}

/// OpenAI's shared noise table: one block of N(0, 1) floats, built from a fixed seed in every
/// process that needs it (once per process), so a perturbation travels as an offset into it.
class NoiseTable {
 public:
  static constexpr std::size_t size = std::size_t(1) << 22;  // 16 MiB of floats
  /// The table of `seed` (built at the first call in this process).
  static const NoiseTable& of(std::uint64_t seed) {
    static NoiseTable table(seed);
    if (table.seed_ != seed) throw std::logic_error("es: one noise table per process, and this one has another seed");
    return table;
  }
  const float* at(std::size_t offset) const { return values_.data() + offset; }
  /// An offset at which `n` values fit, from a seed.
  static std::size_t offset(std::uint64_t seed, std::size_t n) { return mix(seed, 0x5eed) % (size - n + 1); }

 private:
  explicit NoiseTable(std::uint64_t seed) : seed_(seed), values_(size) {
    Random r(seed);
    for (auto& v : values_) v = float(r.normal());
  }
  std::uint64_t seed_;
  std::vector<float> values_;
};

/// A tanh MLP policy: obs -> hidden -> actions, the action the largest output. Parameters in
/// one vector (weights, then biases, layer by layer); observations normalised first.
struct PolicyShape {
  int obs = 0, hidden = 0, actions = 0;
  std::size_t parameters() const { return std::size_t(obs * hidden + hidden + hidden * actions + actions); }
};

/// What travels to a worker with each task: the parameters, then the observations' mean and
/// standard deviation (the normalisation the driver measured so far).
struct PolicyView {
  PolicyShape shape;
  const double* theta;  // shape.parameters()
  const double* mean;   // shape.obs
  const double* std;    // shape.obs
};

inline int act(const PolicyView& p, const double* obs, const float* noise = nullptr, double sigma = 0) {
  const int n_obs = p.shape.obs, n_hid = p.shape.hidden, n_act = p.shape.actions;
  auto w = [&](std::size_t i) { return p.theta[i] + (noise ? sigma * double(noise[i]) : 0.0); };
  double x[16], h[256];
  if (n_obs > 16 || n_hid > 256) throw std::invalid_argument("es: at most 16 observations and 256 hidden units");
  for (int i = 0; i < n_obs; ++i) x[i] = std::clamp((obs[i] - p.mean[i]) / p.std[i], -5.0, 5.0);
  std::size_t k = 0;
  const std::size_t b1 = std::size_t(n_obs * n_hid), w2 = b1 + n_hid, b2 = w2 + std::size_t(n_hid * n_act);
  for (int j = 0; j < n_hid; ++j) {
    double s = w(b1 + j);
    for (int i = 0; i < n_obs; ++i) s += w(k + std::size_t(j * n_obs + i)) * x[i];
    h[j] = std::tanh(s);
  }
  int best = 0;
  double best_out = -1e300;
  for (int a = 0; a < n_act; ++a) {
    double s = w(b2 + a);
    for (int j = 0; j < n_hid; ++j) s += w(w2 + std::size_t(a * n_hid + j)) * h[j];
    if (s > best_out) best_out = s, best = a;
  }
  return best;
}

/// Sums of the observations an episode saw, for the normalisation.
struct ObsSums {
  std::vector<double> sum, sumsq;
  double count = 0;
};

/// One episode of `Env` from `seed` with the policy (perturbed by sigma * noise if given); its
/// return and length, and the observations added to `seen` if given.
template <class Env>
std::pair<double, int> episode(const PolicyView& p, std::uint64_t seed, const float* noise, double sigma,
                               ObsSums* seen) {
  Env env;
  env.reset(seed);
  double ret = 0;
  for (;;) {
    const double* o = env.obs();
    if (seen) {
      for (int i = 0; i < Env::obs_size; ++i) {
        seen->sum[std::size_t(i)] += o[i];
        seen->sumsq[std::size_t(i)] += o[i] * o[i];
      }
      seen->count += 1;
    }
    const envs::Step s = env.step(act(p, o, noise, sigma));
    ret += s.reward;
    if (s.terminated || s.truncated) return {ret, env.steps()};
  }
}

/// OpenAI's fitness shaping: ranks of all returns mapped to [-0.5, 0.5] (ties broken by
/// position, so the result depends on the returns alone).
inline std::vector<double> centred_ranks(const std::vector<double>& x) {
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  const double n = double(x.size() > 1 ? x.size() - 1 : 1);
  for (std::size_t k = 0; k < order.size(); ++k) r[order[k]] = double(k) / n - 0.5;
  return r;
}

/// Adam (Kingma and Ba) for ascent: theta += lr * m_hat / (sqrt(v_hat) + eps).
struct Adam {
  std::vector<double> m, v;
  double t = 0;
  void step(std::vector<double>& theta, const std::vector<double>& grad, double lr, double b1 = 0.9, double b2 = 0.999,
            double eps = 1e-8) {
    if (m.empty()) m.assign(theta.size(), 0.0), v.assign(theta.size(), 0.0);
    t += 1;
    const double a = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < theta.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * grad[i];
      v[i] = b2 * v[i] + (1 - b2) * grad[i] * grad[i];
      theta[i] += a * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
};

}  // namespace es
