// Finds and opens libfibra_rl_torch.so, once per process, when the first PpoLearner is made.
#include "learner_module.hpp"

#include <fibra/error.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace fibra::rl::detail {
namespace {

// Where to look, in order: the variable if set (then nothing else: an explicit choice should not
// fall back silently), else the build tree's module, else the installed one.
std::vector<std::string> candidates() {
  if (const char* path = std::getenv("FIBRA_RL_TORCH_MODULE"); path && *path) return {path};
  std::vector<std::string> paths;
#ifdef FIBRA_RL_TORCH_BUILD_PATH
  paths.push_back(FIBRA_RL_TORCH_BUILD_PATH);
#endif
#ifdef FIBRA_RL_TORCH_INSTALL_PATH
  paths.push_back(FIBRA_RL_TORCH_INSTALL_PATH);
#endif
  return paths;
}

LearnerFactory load() {
  std::string tried;
  for (const std::string& path : candidates()) {
    // Never closed: libtorch registers operators and threads that do not survive an unload.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      tried += "\n  " + path + ": " + dlerror();
      continue;
    }
    if (void* symbol = dlsym(handle, learner_factory_symbol)) return reinterpret_cast<LearnerFactory>(symbol);
    tried += "\n  " + path + ": " + dlerror();
  }
#ifdef FIBRA_RL_TORCH_BUILD_PATH
  const std::string build = "";
#else
  const std::string build = "\nThis build of fibra was configured without libtorch (find_package(Torch) found none).";
#endif
  throw ConfigError("fibra::rl: cannot load the learner's libtorch module (libfibra_rl_torch.so); tried:" +
                    (tried.empty() ? std::string("\n  (no path: FIBRA_RL_TORCH_MODULE is not set)") : tried) + build +
                    "\nTo fix: install libtorch-dev (Debian, CPU), configure fibra again and build the target "
                    "fibra_rl_torch (cmake --build BUILD --target fibra_rl_torch), or set FIBRA_RL_TORCH_MODULE to "
                    "the path of libfibra_rl_torch.so. Only the learner needs it; rollout workers never load it.");
}

}  // namespace

LearnerFactory learner_factory() {
  static std::mutex mutex;
  static LearnerFactory factory = nullptr;
  std::lock_guard lock(mutex);
  if (!factory) factory = load();
  return factory;
}

}  // namespace fibra::rl::detail
