// fibra::rl's spaces and the registry of environments by name.
#include <fibra/rl/env.hpp>
#include <fibra/rl/pendulum.hpp>

#include "builtins.hpp"

#include <map>
#include <mutex>
#include <utility>

namespace fibra::rl {

std::size_t Box::size() const {
  std::size_t n = 1;
  for (std::size_t extent : shape) n *= extent;
  return n;
}

std::size_t action_size(const Space& space) {
  if (const Box* box = std::get_if<Box>(&space)) return box->size();
  return 1;
}

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, EnvFactory, std::less<>> factories;
};

// Built on first use, with the built-ins in it, so a FIBRA_ENV in any static initialiser finds it.
Registry& registry() {
  static Registry r{.mutex = {},
                    .factories = {{"CartPole-v1", detail::make_cartpole},
                                  {"Acrobot-v1", detail::make_acrobot},
                                  {"Pendulum-v1", [] { return std::unique_ptr<Env>(std::make_unique<Pendulum>()); }}}};
  return r;
}

std::string joined_names(const std::map<std::string, EnvFactory, std::less<>>& factories) {
  std::string out;
  for (const auto& [name, factory] : factories) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

void register_env(const std::string& name, EnvFactory factory) {
  if (name.empty()) throw ConfigError("fibra::rl: FIBRA_ENV needs a non-empty name");
  if (!factory) throw ConfigError("fibra::rl: environment '" + name + "' registered without a factory");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second)
    throw ConfigError("fibra::rl: an environment named '" + name +
                      "' is already registered; give FIBRA_ENV another name");
}

std::unique_ptr<Env> make_env(std::string_view name) {
  Registry& r = registry();
  EnvFactory factory;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(name);
    if (it == r.factories.end())
      throw ConfigError("fibra::rl: no environment named '" + std::string(name) +
                        "'; known: " + joined_names(r.factories) + " (register one with FIBRA_ENV)");
    factory = it->second;
  }
  return factory();
}

std::vector<std::string> env_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

}  // namespace fibra::rl
