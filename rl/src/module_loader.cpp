// Finds and opens libfibra_rl_torch.so, once per process, when the first PpoLearner (or the first
// Policy of a user's torch network) is made.
#include "learner_module.hpp"

#include "common/env.hpp"  // the FIBRA_* names (header only)

#include <fibra/error.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace fibra::rl::detail {
namespace {

// Where to look, in order: the variable if set (then nothing else: an explicit choice should not
// fall back silently), else the build tree's module, else the installed one.
std::vector<std::string> candidates() {
  if (const char* path = std::getenv(fibra::detail::env::Name("FIBRA_RL_TORCH_MODULE").c_str()); path && *path)
    return {path};
  std::vector<std::string> paths;
#ifdef FIBRA_RL_TORCH_BUILD_PATH
  paths.push_back(FIBRA_RL_TORCH_BUILD_PATH);
#endif
#ifdef FIBRA_RL_TORCH_INSTALL_PATH
  paths.push_back(FIBRA_RL_TORCH_INSTALL_PATH);
#endif
  return paths;
}

void* load(const char* symbol_name) {
  std::string tried;
  for (const std::string& path : candidates()) {
    // Never closed: libtorch registers operators and threads that do not survive an unload.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      tried += "\n  " + path + ": " + dlerror();
      continue;
    }
    if (void* symbol = dlsym(handle, symbol_name)) return symbol;
    tried += "\n  " + path + ": " + dlerror();
  }
#ifdef FIBRA_RL_TORCH_BUILD_PATH
  const std::string build = "";
#else
  const std::string build = "\nThis build of fibra was configured without libtorch (find_package(Torch) found none).";
#endif
  throw ConfigError(
      "fibra::rl: cannot load the learner's libtorch module (libfibra_rl_torch.so); tried:" +
      (tried.empty() ? std::string("\n  (no path: FIBRA_RL_TORCH_MODULE is not set)") : tried) + build +
      "\nTo fix: install libtorch-dev (Debian, CPU), configure fibra again and build the target "
      "fibra_rl_torch (cmake --build BUILD --target fibra_rl_torch), or set FIBRA_RL_TORCH_MODULE to "
      "the path of libfibra_rl_torch.so. Only the learner needs it, and rollout workers of a user's torch "
      "network (PolicySpec::torch_module); rollout workers of the built-in MLPs never load it.");
}

// The symbol, looked up once for the process's life.
void* symbol(const char* name) {
  static std::mutex mutex;
  static std::map<std::string, void*> symbols;
  std::lock_guard lock(mutex);
  void*& found = symbols[name];
  if (!found) found = load(name);
  return found;
}

}  // namespace

LearnerFactory learner_factory() { return reinterpret_cast<LearnerFactory>(symbol(learner_factory_symbol)); }
NetworkFactory network_factory() { return reinterpret_cast<NetworkFactory>(symbol(network_factory_symbol)); }

}  // namespace fibra::rl::detail
