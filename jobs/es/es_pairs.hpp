// jobs/es/es_pairs.hpp: the ES job's tasks on environments with a box of actions (the MuJoCo
// bodies, Pendulum-v1), registered with fibra: an antithetic pair, and one episode of the policy.
// Included by the job (jobs/es/es.cpp) and by B12 for ES (benchmarks/b12_es.cpp), which times them
// against a plain loop; one translation unit of a program includes it.
#pragma once

#include <fibra/fibra.hpp>
#include <fibra/rl/env.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "es_control.hpp"
#include "es_core.hpp"

namespace es {

// This process's environment of each name, made at its first use and reused (a MuJoCo model is
// compiled once per process; the environment keeps its simulation state across episodes).
inline fibra::rl::Env& env_named(const std::string& name) {
  thread_local std::map<std::string, std::unique_ptr<fibra::rl::Env>> made;
  auto& e = made[name];
  if (!e) e = fibra::rl::make_env(name);
  return *e;
}

/// One pair's arguments for evaluate_pair_box, as a starmap takes them.
using PairArgs =
    std::tuple<std::string, int, std::vector<double>, std::uint64_t, std::uint64_t, std::uint64_t, double, int>;

}  // namespace es

// One antithetic pair on an environment with a box of actions: r+, r-, the steps of each, then how
// many observations the + episode summed (0 unless `observe`), then their sums and squared sums.
// `policy` is theta, then the observations' mean, then their standard deviation.
inline std::vector<double> evaluate_pair_box(const std::string& env_name, int hidden, const std::vector<double>& policy,
                                             std::uint64_t noise_seed, std::uint64_t offset, std::uint64_t episode_seed,
                                             double sigma, int observe) {
  fibra::rl::Env& env = es::env_named(env_name);
  const es::Controller c = es::Controller::of(env, hidden);
  const std::size_t n = c.parameters(), obs = std::size_t(c.observations());
  if (policy.size() != n + 2 * obs) throw std::invalid_argument("es: a policy of the wrong size for " + env_name);
  const std::vector<double> theta(policy.begin(), policy.begin() + std::ptrdiff_t(n));
  const double *mean = policy.data() + n, *stddev = mean + obs;
  const float* eps = es::NoiseTable::of(noise_seed).at(offset);
  es::ObsSums seen{std::vector<double>(obs), std::vector<double>(obs), 0};
  const es::Outcome up = es::run_episode(env, c, es::perturbed(theta, eps, sigma).data(), mean, stddev, episode_seed,
                                         observe ? &seen : nullptr);
  const es::Outcome down =
      es::run_episode(env, c, es::perturbed(theta, eps, -sigma).data(), mean, stddev, episode_seed, nullptr);
  std::vector<double> out{up.ret, down.ret, double(up.steps), double(down.steps), seen.count};
  if (observe) {
    out.insert(out.end(), seen.sum.begin(), seen.sum.end());
    out.insert(out.end(), seen.sumsq.begin(), seen.sumsq.end());
  }
  return out;
}
FIBRA_REMOTE(evaluate_pair_box);

// One episode of the policy itself on an environment with a box of actions: its return.
inline double evaluate_policy_box(const std::string& env_name, int hidden, const std::vector<double>& policy,
                                  std::uint64_t episode_seed) {
  fibra::rl::Env& env = es::env_named(env_name);
  const es::Controller c = es::Controller::of(env, hidden);
  const std::size_t n = c.parameters(), obs = std::size_t(c.observations());
  if (policy.size() != n + 2 * obs) throw std::invalid_argument("es: a policy of the wrong size for " + env_name);
  return es::run_episode(env, c, policy.data(), policy.data() + n, policy.data() + n + obs, episode_seed, nullptr).ret;
}
FIBRA_REMOTE(evaluate_policy_box);
