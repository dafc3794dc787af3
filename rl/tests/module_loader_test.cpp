// The learner's module cannot be loaded: the error names the path tried, dlerror's reason and the fix.
#include <fibra/rl/ppo.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

std::string learner_error(const char* module) {
  setenv("FIBRA_RL_TORCH_MODULE", module, 1);
  try {
    fibra::rl::PpoLearner learner(fibra::rl::PolicySpec::for_env("CartPole-v1"), fibra::rl::PpoConfig{});
  } catch (const fibra::ConfigError& e) {
    unsetenv("FIBRA_RL_TORCH_MODULE");
    return e.what();
  }
  unsetenv("FIBRA_RL_TORCH_MODULE");
  return "(no error)";
}

#if FIBRA_RL_TEST_TORCH
const std::string fix =
    "\nTo fix: install libtorch-dev (Debian, CPU), configure fibra again and build the target fibra_rl_torch (cmake "
    "--build BUILD --target fibra_rl_torch), or set FIBRA_RL_TORCH_MODULE to the path of libfibra_rl_torch.so. Only "
    "the learner needs it, and rollout workers of a user's torch network (PolicySpec::torch_module); rollout "
    "workers of the built-in MLPs never load it.";
#else
const std::string fix =
    "\nThis build of fibra was configured without libtorch (find_package(Torch) found none)."
    "\nTo fix: install libtorch-dev (Debian, CPU), configure fibra again and build the target fibra_rl_torch (cmake "
    "--build BUILD --target fibra_rl_torch), or set FIBRA_RL_TORCH_MODULE to the path of libfibra_rl_torch.so. Only "
    "the learner needs it, and rollout workers of a user's torch network (PolicySpec::torch_module); rollout "
    "workers of the built-in MLPs never load it.";
#endif

TEST(LearnerModule, MissingModuleSaysWhereItLookedAndWhatToDo) {
  EXPECT_EQ(
      learner_error("/nonexistent/libfibra_rl_torch.so"),
      "fibra::rl: cannot load the learner's libtorch module (libfibra_rl_torch.so); tried:\n"
      "  /nonexistent/libfibra_rl_torch.so: /nonexistent/libfibra_rl_torch.so: cannot open shared object file: No "
      "such file or directory" +
          fix);
}

TEST(LearnerModule, ALibraryThatIsNotTheModule) {
  // dlerror names the library by the path it resolved, which depends on the machine.
  const std::string error = learner_error("libm.so.6");
  const std::string head =
      "fibra::rl: cannot load the learner's libtorch module (libfibra_rl_torch.so); tried:\n  libm.so.6: ";
  const std::string tail = "libm.so.6: undefined symbol: fibra_rl_torch_make_learner" + fix;
  EXPECT_EQ(error.substr(0, head.size()), head) << error;
  ASSERT_GE(error.size(), tail.size());
  EXPECT_EQ(error.substr(error.size() - tail.size()), tail) << error;
}

}  // namespace
