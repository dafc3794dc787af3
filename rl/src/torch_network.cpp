// A user's torch network from fibra_rl_core: built through the module's NetworkFactory.
#include "torch_network.hpp"

#include <array>
#include <map>
#include <mutex>
#include <string>

namespace fibra::rl::detail {
namespace {

// What makes two specs' networks the same shape.
std::string key_of(const PolicySpec& spec) {
  std::string key = spec.torch_module + "|" + std::to_string(spec.observation_size) + "|" +
                    std::to_string(spec.actor_outputs()) + "|" + (spec.discrete() ? "d" : "b") + "|" +
                    (spec.activation == Activation::relu ? "relu" : "tanh");
  for (int h : spec.hidden) key += "," + std::to_string(h);
  return key;
}

}  // namespace

ModuleSpec network_spec(const PolicySpec& spec, std::uint64_t seed) {
  ModuleSpec m;
  m.observation_size = spec.observation_size;
  m.action_size = spec.action_size();
  m.actor_outputs = spec.actor_outputs();
  m.discrete = spec.discrete();
  m.relu = spec.activation == Activation::relu;
  m.torch_module = spec.torch_module;
  m.hidden = spec.hidden;
  m.seed = seed;
  return m;
}

std::shared_ptr<NetworkModule> make_network(const PolicySpec& spec, std::uint64_t seed) {
  const ModuleSpec m = network_spec(spec, seed);
  const NetworkFactory factory = network_factory();
  std::array<char, 1024> error{};
  NetworkModule* network = factory(learner_module_abi, &m, error.data(), error.size());
  if (!network)
    throw ConfigError(std::string("fibra::rl: the libtorch module could not make the policy network: ") + error.data());
  return std::shared_ptr<NetworkModule>(network);
}

std::vector<NamedShape> network_layout(const PolicySpec& spec) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<NamedShape>> layouts;
  const std::string key = key_of(spec);
  {
    std::lock_guard lock(mutex);
    if (auto it = layouts.find(key); it != layouts.end()) return it->second;
  }
  std::vector<NamedShape> layout = make_network(spec, 0)->layout();
  std::lock_guard lock(mutex);
  return layouts.emplace(key, std::move(layout)).first->second;
}

}  // namespace fibra::rl::detail
