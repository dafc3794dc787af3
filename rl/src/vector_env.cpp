// VectorEnv: N copies stepped in order, each reset in the step that ends its episode.
#include <fibra/rl/vector_env.hpp>

#include "envs.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace fibra::rl {
namespace {

std::vector<std::unique_ptr<Env>> make_copies(std::string_view name, int num_envs) {
  if (num_envs < 1)
    throw ConfigError("fibra::rl: VectorEnv(\"" + std::string(name) + "\", " + std::to_string(num_envs) +
                      "): the number of copies must be at least 1");
  std::vector<std::unique_ptr<Env>> envs;
  for (int i = 0; i < num_envs; ++i) envs.push_back(make_env(name));
  return envs;
}

bool same_box(const Box& a, const Box& b) { return a.shape == b.shape && a.low == b.low && a.high == b.high; }

bool same_space(const Space& a, const Space& b) {
  if (a.index() != b.index()) return false;
  if (const Discrete* d = std::get_if<Discrete>(&a)) return d->n == std::get<Discrete>(b).n;
  return same_box(std::get<Box>(a), std::get<Box>(b));
}

// Episode k of a copy whose seed is `copy_seed`: splitmix64's output mixes consecutive states into
// unrelated values, and is a bijection, so one copy's episodes never share a seed.
std::uint64_t episode_seed(std::uint64_t copy_seed, std::uint64_t k) { return envs::SplitMix64(copy_seed + k).next(); }

}  // namespace

VectorEnv::VectorEnv(std::string_view name, int num_envs) : VectorEnv(make_copies(name, num_envs)) {}

VectorEnv::VectorEnv(std::vector<std::unique_ptr<Env>> envs) : envs_(std::move(envs)) {
  if (envs_.empty()) throw ConfigError("fibra::rl: a VectorEnv needs at least one environment");
  if (std::any_of(envs_.begin(), envs_.end(), [](const auto& e) { return e == nullptr; }))
    throw ConfigError("fibra::rl: VectorEnv was given a null environment");
  observation_space_ = envs_[0]->observation_space();
  action_space_ = envs_[0]->action_space();
  for (std::size_t i = 1; i < envs_.size(); ++i)
    if (!same_box(envs_[i]->observation_space(), observation_space_) ||
        !same_space(envs_[i]->action_space(), action_space_))
      throw ConfigError("fibra::rl: VectorEnv's environment " + std::to_string(i) +
                        " has other spaces than environment 0; give copies of one environment");
  obs_size_ = observation_space_.size();
  action_size_ = rl::action_size(action_space_);
  const std::size_t n = envs_.size();
  copy_seeds_.assign(n, 0);
  episodes_.assign(n, 0);
  episode_seeds_.assign(n, 0);
  obs_.assign(n * obs_size_, 0.0);
  final_obs_.assign(n * obs_size_, 0.0);
  rewards_.assign(n, 0.0);
  terminated_.assign(n, 0);
  truncated_.assign(n, 0);
  step_ = {.observations = obs_,
           .final_observations = final_obs_,
           .rewards = rewards_,
           .terminated = terminated_,
           .truncated = truncated_};
}

std::span<const double> VectorEnv::reset(std::uint64_t seed) {
  envs::SplitMix64 master(seed);
  for (std::size_t i = 0; i < envs_.size(); ++i) {
    copy_seeds_[i] = master.next();
    episodes_[i] = 0;
    episode_seeds_[i] = episode_seed(copy_seeds_[i], 0);
    std::span<const double> o = envs_[i]->reset(episode_seeds_[i]);
    std::copy(o.begin(), o.end(), obs_.begin() + static_cast<std::ptrdiff_t>(i * obs_size_));
  }
  std::fill(rewards_.begin(), rewards_.end(), 0.0);
  std::fill(terminated_.begin(), terminated_.end(), 0);
  std::fill(truncated_.begin(), truncated_.end(), 0);
  started_ = true;
  return obs_;
}

const VectorStep& VectorEnv::step(std::span<const double> actions) {
  if (!started_) throw std::logic_error("fibra::rl: VectorEnv::step before reset");
  if (actions.size() != envs_.size() * action_size_)
    throw std::invalid_argument("fibra::rl: VectorEnv::step takes " + std::to_string(envs_.size()) + " x " +
                                std::to_string(action_size_) + " action values, got " + std::to_string(actions.size()));
  for (std::size_t i = 0; i < envs_.size(); ++i) {
    const StepResult r = envs_[i]->step(actions.subspan(i * action_size_, action_size_));
    auto row = obs_.begin() + static_cast<std::ptrdiff_t>(i * obs_size_);
    auto final_row = final_obs_.begin() + static_cast<std::ptrdiff_t>(i * obs_size_);
    std::copy(r.observation.begin(), r.observation.end(), final_row);
    rewards_[i] = r.reward;
    terminated_[i] = r.terminated;
    truncated_[i] = r.truncated;
    if (r.terminated || r.truncated) {  // same-step autoreset
      episode_seeds_[i] = episode_seed(copy_seeds_[i], ++episodes_[i]);
      std::span<const double> o = envs_[i]->reset(episode_seeds_[i]);
      std::copy(o.begin(), o.end(), row);
    } else {
      std::copy(r.observation.begin(), r.observation.end(), row);
    }
  }
  return step_;
}

}  // namespace fibra::rl
