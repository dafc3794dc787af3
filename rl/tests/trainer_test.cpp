// rl/tests/trainer_test.cpp: PpoTrainer on a real pool, its rollout workers real actors' processes.
// - The same seed gives the same weights on 1 worker of 4 copies as on 2 of 2 (bit for bit).
// - A rollout actor SIGKILLed in the middle of its fragment costs that fragment only: the
//   iteration learns from the other worker's, the actor is restarted, later iterations have both.
// - A rollout actor that hangs is ended at sample_timeout_s, the same.
// - A user environment registered in this program (FIBRA_ENV) trains.
// The expected values are counts fixed by the options (copies x steps) and the planted failures.
#include <fibra/fibra.hpp>
#include <fibra/rl.hpp>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace rl = fibra::rl;

namespace {

// A directory for this run's marker files, named by the driver's pid (runs side by side do not
// meet): $FIBRA_TEST_MARKERS, which main() sets in the driver before MPI starts, so that the
// actors' processes (which run main() too, up to the Runtime) inherit the driver's.
const std::string& marker_dir() {
  static const std::string d = [] {
    if (const char* set = std::getenv("FIBRA_TEST_MARKERS")) return std::string(set);
    auto p = std::filesystem::temp_directory_path() / ("fibra-rl-trainer-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    ::setenv("FIBRA_TEST_MARKERS", p.c_str(), 1);
    return p.string();
  }();
  return d;
}

enum class Fault { kill, hang };

// CartPole-v1 whose step does `fault` once, in whichever process gets there first at its 50th step:
// SIGKILL itself, or sleep for ever (the marker file says it happened, and that it happens once).
template <Fault fault>
class Faulty : public rl::Env {
 public:
  Faulty() : inner_(rl::make_env("CartPole-v1")) {}
  rl::Box observation_space() const override { return inner_->observation_space(); }
  rl::Space action_space() const override { return inner_->action_space(); }
  std::span<const double> reset(std::uint64_t seed) override { return inner_->reset(seed); }
  rl::StepResult step(std::span<const double> action) override {
    if (++steps_ == 50) {
      const std::string marker = marker_dir() + (fault == Fault::kill ? "/kill" : "/hang");
      const int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
      if (fd >= 0) {
        ::close(fd);
        if (fault == Fault::kill) ::kill(::getpid(), SIGKILL);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
    return inner_->step(action);
  }

 private:
  std::unique_ptr<rl::Env> inner_;
  long steps_ = 0;
};
using Killing = Faulty<Fault::kill>;
using Hanging = Faulty<Fault::hang>;
FIBRA_ENV("KillingCartPole-v0", Killing);
FIBRA_ENV("HangingCartPole-v0", Hanging);

rl::TrainerOptions small(int workers, int envs_per_worker) {
  rl::TrainerOptions o;
  o.env = "CartPole-v1";
  o.workers = workers;
  o.envs_per_worker = envs_per_worker;
  o.fragment_steps = 16;
  o.hidden = {16, 16};
  o.ppo.seed = 11;
  o.ppo.epochs = 2;
  o.ppo.minibatch_size = 32;
  o.ppo.total_steps = 100'000;
  return o;
}

TEST(Trainer, SameWeightsForAnySplitOfTheCopies) {
  std::vector<float> one, two;
  std::vector<double> curve_one, curve_two;
  {
    rl::PpoTrainer t(small(1, 4));
    for (int i = 0; i < 4; ++i) curve_one.push_back(t.train().learn.policy_loss);
    one = t.weights().params;
  }
  {
    rl::PpoTrainer t(small(2, 2));
    for (int i = 0; i < 4; ++i) curve_two.push_back(t.train().learn.policy_loss);
    two = t.weights().params;
  }
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(curve_one, curve_two);
  EXPECT_EQ(one, two) << "the weights after 4 iterations differ between 1 worker x 4 copies and 2 x 2";
  // ... and the learner did move them (a trainer that never learned would pass the line above).
  rl::PpoTrainer fresh(small(1, 4));
  EXPECT_NE(fresh.weights().params, one);
}

// One fault planted in a worker's process; the iterations go on.
void survives(const char* env, const char* marker, double sample_timeout_s) {
  rl::TrainerOptions o = small(2, 2);
  o.env = env;
  o.sample_timeout_s = sample_timeout_s;
  rl::PpoTrainer t(o);
  std::size_t lost = 0, fragments = 0;
  std::uint64_t steps = 0;
  const int iterations = 6;  // 16 steps a copy an iteration: its 50th step comes in iteration 4
  for (int i = 0; i < iterations; ++i) {
    const rl::Iteration it = t.train();
    lost += it.lost_fragments;
    fragments += it.fragments;
    EXPECT_EQ(it.fragments + it.lost_fragments, 2u) << "iteration " << it.iteration;
    EXPECT_EQ(it.env_steps - steps, it.fragments * 2 * 16) << "iteration " << it.iteration;
    steps = it.env_steps;
  }
  EXPECT_TRUE(std::filesystem::exists(marker_dir() + "/" + marker)) << "the fault was never planted";
  EXPECT_EQ(lost, 1u) << "one fault should cost exactly one fragment";
  EXPECT_EQ(fragments, std::size_t(2 * iterations - 1));
  EXPECT_EQ(t.train().fragments, 2u) << "the restarted worker sends fragments again";
}

TEST(Trainer, AWorkerKilledMidFragmentCostsThatFragment) { survives("KillingCartPole-v0", "kill", 60); }

TEST(Trainer, AWorkerThatHangsIsEndedAtTheSampleLimit) { survives("HangingCartPole-v0", "hang", 4); }

// A user's environment: a corridor of 6 cells, reward -1 a step until the right end; the optimum
// takes 5 steps (return -5), a random walk about 30. PPO learns to walk right.
class Corridor : public rl::Env {
 public:
  rl::Box observation_space() const override { return {.shape = {1}, .low = {0}, .high = {5}}; }
  rl::Space action_space() const override { return rl::Discrete{2}; }
  std::span<const double> reset(std::uint64_t) override {
    obs_[0] = 0;
    t_ = 0;
    return obs_;
  }
  rl::StepResult step(std::span<const double> action) override {
    obs_[0] = std::max(0.0, obs_[0] + (action[0] == 1 ? 1 : -1));
    ++t_;
    return {.observation = obs_, .reward = -1, .terminated = obs_[0] >= 5, .truncated = t_ >= 100};
  }

 private:
  std::array<double, 1> obs_{0};
  int t_ = 0;
};
FIBRA_ENV("Corridor-v0", Corridor);

TEST(Trainer, AUserEnvironmentTrains) {
  rl::TrainerOptions o = small(2, 4);
  o.env = "Corridor-v0";
  o.ppo.epochs = 4;
  rl::PpoTrainer t(o);
  const double before = t.evaluate(20, false).mean;
  for (int i = 0; i < 30; ++i) t.train();
  const rl::EvalResult after = t.evaluate(20);
  EXPECT_EQ(after.mean, -5) << "the greedy policy should walk straight right (sampled before: " << before << ")";
}

}  // namespace

int main(int argc, char** argv) {
  (void)marker_dir();  // (before MPI starts: see marker_dir)
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  std::filesystem::remove_all(marker_dir());
  return rc;
}
