// rl/tests/trainer_test.cpp: PpoTrainer on a real pool, its rollout workers real actors' processes.
// - The same seed gives the same weights on 1 worker of 4 copies as on 2 of 2 (bit for bit).
// - A rollout actor SIGKILLed in the middle of its fragment costs that fragment only: the
//   iteration learns from the other worker's, the actor is restarted, later iterations have both.
// - A rollout actor that hangs is ended at sample_timeout_s, the same.
// - A user environment registered in this program (FIBRA_ENV) trains.
// - A run saved after 2 iterations and resumed for 3 (on 2 workers of 2 copies, and on 1 of 4)
//   ends with the weights, the whole learner state and the curve of a run of 5 never stopped, bit
//   for bit; h5py reads the file (layers as datasets); a file of another run is refused, naming
//   what differs.
// The expected values are counts fixed by the options (copies x steps) and the planted failures.
#include <fibra/fibra.hpp>
#include <fibra/hdf5_io/tables.hpp>
#include <fibra/rl.hpp>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

enum class Fault { kill, hang, kill_async, hang_async };  // (*_async: a marker of their own)

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
      const char* names[] = {"/kill", "/hang", "/kill_async", "/hang_async"};
      const std::string marker = marker_dir() + names[static_cast<int>(fault)];
      const int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
      if (fd >= 0) {
        ::close(fd);
        if (fault == Fault::kill || fault == Fault::kill_async) ::kill(::getpid(), SIGKILL);
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
using KillingAsync = Faulty<Fault::kill_async>;
using HangingAsync = Faulty<Fault::hang_async>;
FIBRA_ENV("KillingCartPole-v0", Killing);
FIBRA_ENV("HangingCartPole-v0", Hanging);
FIBRA_ENV("KillingCartPoleAsync-v0", KillingAsync);
FIBRA_ENV("HangingCartPoleAsync-v0", HangingAsync);

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

// The asynchronous learner: each update takes the fragments that have come (between 1 and every
// queued call), their lag is counted, and a worker SIGKILLed with calls queued loses those (at
// most async_calls_per_worker), is restarted, and sends fragments again.
TEST(Trainer, TheAsynchronousLearnerTakesWhatCameAndSurvivesAKill) {
  rl::TrainerOptions o = small(2, 2);
  o.env = "KillingCartPoleAsync-v0";
  o.asynchronous = true;
  rl::PpoTrainer t(o);
  std::size_t lost = 0, most_after_a_wait = 0;
  std::uint64_t steps = 0, max_lag = 0, version = 0;
  for (int i = 0; i < 30; ++i) {
    // The last few wait first: every fragment queued has come by then (each takes microseconds).
    if (i >= 25) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const rl::Iteration it = t.train();
    if (i >= 25) most_after_a_wait = std::max<std::size_t>(most_after_a_wait, it.fragments);
    lost += it.lost_fragments;
    EXPECT_LE(it.fragments + it.lost_fragments, 4u) << "iteration " << it.iteration << ": more than were queued";
    EXPECT_EQ(it.env_steps - steps, it.fragments * 2 * 16) << "iteration " << it.iteration;
    steps = it.env_steps;
    max_lag = std::max(max_lag, it.max_lag);
    if (it.fragments > 0) {
      EXPECT_EQ(t.weights().version, ++version) << "one update per train() with fragments";
    }
  }
  EXPECT_TRUE(std::filesystem::exists(marker_dir() + "/kill_async")) << "the fault was never planted";
  EXPECT_GE(lost, 1u);
  EXPECT_LE(lost, 2u) << "a kill costs at most the calls queued at that worker";
  EXPECT_GE(max_lag, 1u) << "with 2 calls queued a worker, some fragments come from older weights";
  EXPECT_EQ(t.train().restarts, 1u) << "one death, counted once whatever calls it took with it";
  // (Not a total over the 30 updates: under load every update may find just one fragment come.)
  EXPECT_GE(most_after_a_wait, 2u) << "an update takes every fragment that has come, not one";
}

// ... and on a pool of the caller's with no task limit (nothing ends a hung call), a worker whose
// oldest call is older than the bound is replaced while the other keeps delivering.
TEST(Trainer, TheAsynchronousLearnerReplacesAHungWorkerOnAPoolWithoutLimits) {
  fibra::Pool pool(1);
  rl::TrainerOptions o = small(2, 2);
  o.env = "HangingCartPoleAsync-v0";
  o.asynchronous = true;
  o.pool = &pool;
  o.sample_timeout_s = 3;
  rl::PpoTrainer t(o);
  std::size_t lost = 0, fragments_after = 0;
  bool replaced = false;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {  // (bounded)
    const rl::Iteration it = t.train();
    lost += it.lost_fragments;
    if (replaced) fragments_after += it.fragments;
    replaced = replaced || it.restarts > 0;
    if (replaced && fragments_after >= 20) break;
  }
  EXPECT_TRUE(std::filesystem::exists(marker_dir() + "/hang_async")) << "the fault was never planted";
  EXPECT_TRUE(replaced) << "the hung worker was never replaced within 20 s (bound 3 s)";
  EXPECT_GE(lost, 1u);
  EXPECT_LE(lost, 2u) << "a hang costs at most the calls queued at that worker";
  EXPECT_GE(fragments_after, 20u) << "fragments should flow again after the replacement";
}

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

// What of an iteration must be the same in a resumed run, on any split of the copies: everything
// but the times and the number of fragments, as bits (a NaN, explained_variance's on a constant
// batch, equals itself).
std::vector<std::uint64_t> curve_point(const rl::Iteration& it) {
  std::vector<std::uint64_t> v{it.iteration, it.env_steps, it.episodes, static_cast<std::uint64_t>(it.learn.steps),
                               static_cast<std::uint64_t>(it.learn.minibatches)};
  for (double x : {it.mean_return, it.learn.policy_loss, it.learn.value_loss, it.learn.entropy, it.learn.approx_kl,
                   it.learn.clip_fraction, it.learn.explained_variance, it.learn.learning_rate, it.learn.clip})
    v.push_back(std::bit_cast<std::uint64_t>(x));
  for (double r : it.episode_returns) v.push_back(std::bit_cast<std::uint64_t>(r));
  return v;
}

void expect_same_learner(const std::vector<rl::NamedArray>& a, const std::vector<rl::NamedArray>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << what;
    EXPECT_EQ(a[i].shape, b[i].shape) << what << ": " << a[i].name;
    EXPECT_TRUE(a[i].values == b[i].values) << what << ": the learner's '" << a[i].name << "' differs";
  }
}

std::string scratch(const std::string& name) { return marker_dir() + "/" + name; }

TEST(Trainer, AResumedRunEqualsOneNeverStopped) {
  constexpr int total = 5, stop_after = 2;
  std::vector<std::vector<std::uint64_t>> whole_curve;
  std::vector<rl::NamedArray> whole_state;
  {
    rl::PpoTrainer t(small(2, 2));
    for (int i = 0; i < total; ++i) whole_curve.push_back(curve_point(t.train()));
    whole_state = t.learner().state();
  }
  const std::string path = scratch("resume.h5");
  {
    rl::PpoTrainer t(small(2, 2));
    for (int i = 0; i < stop_after; ++i) EXPECT_EQ(curve_point(t.train()), whole_curve[std::size_t(i)]);
    t.save(path);
  }
  // The file holds episodes in progress and episodes that ended: the replay is exercised.
  const fibra::hdf5_io::TableFile file = fibra::hdf5_io::read_table_file(path);
  const auto& lengths = std::get<std::vector<std::int64_t>>(file.find_array("copies", "episode_length")->values);
  const auto& episodes = std::get<std::vector<std::int64_t>>(file.find_array("copies", "episodes")->values);
  EXPECT_TRUE(std::any_of(lengths.begin(), lengths.end(), [](std::int64_t n) { return n > 0; }))
      << "no copy was in the middle of an episode when saved";
  EXPECT_TRUE(std::any_of(episodes.begin(), episodes.end(), [](std::int64_t n) { return n > 0; }))
      << "no episode had ended when saved";
  // Resumed on the same split, and on one worker of all 4 copies.
  for (const auto& [workers, copies] : {std::pair{2, 2}, std::pair{1, 4}}) {
    const std::string what = "resumed on " + std::to_string(workers) + " x " + std::to_string(copies);
    rl::TrainerOptions o = small(workers, copies);
    o.resume_from = path;
    rl::PpoTrainer t(o);
    EXPECT_EQ(t.iteration(), std::uint64_t(stop_after)) << what;
    for (int i = stop_after; i < total; ++i)
      EXPECT_EQ(curve_point(t.train()), whole_curve[std::size_t(i)]) << what << ", iteration " << i + 1;
    expect_same_learner(t.learner().state(), whole_state, what);
  }
}

// The file as h5py sees it (docs/rl.md, "Checkpoints and resume"): layers by name, their shapes.
TEST(Trainer, H5pyReadsTheFile) {
  const std::string python = FIBRA_TEST_PYTHON;
  if (python.empty() || std::system((python + " -c 'import h5py' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "no python3 with h5py (" << (python.empty() ? "none found" : python)
                 << "): apt-get install python3-h5py";
  const std::string path = scratch("h5py.h5"), script = scratch("check.py");
  {
    rl::PpoTrainer t(small(2, 2));
    t.train();
    t.train();
    t.save(path);
  }
  std::ofstream(script) << R"(import sys, h5py
f = h5py.File(sys.argv[1], "r")
def attr(k):
    v = f.attrs[k]
    return v.decode() if isinstance(v, bytes) else v
L = f["learner"]
expect = {"actor.0.weight": (16, 4), "actor.0.bias": (16,), "actor.2.weight": (16, 16), "actor.4.weight": (2, 16),
          "actor.4.bias": (2,), "critic.0.weight": (16, 4), "critic.4.weight": (1, 16), "critic.4.bias": (1,),
          "adam.exp_avg.actor.0.weight": (16, 4), "adam.exp_avg_sq.critic.4.bias": (1,), "adam.step": (),
          "normaliser.mean": (4,), "normaliser.m2": (4,), "learner.steps": ()}
for name, shape in expect.items():
    assert L[name].shape == shape, (name, L[name].shape, shape)
assert L["actor.0.weight"].dtype == "float32", L["actor.0.weight"].dtype
assert L["learner.steps"][()] == 128, L["learner.steps"][()]
T = f["trainer"]
assert T["iteration"][()] == 2 and T["env_steps"][()] == 128, (T["iteration"][()], T["env_steps"][()])
assert T["recent_returns"].ndim == 1 and T["recent_returns"].dtype == "float64"
C = f["copies"]
for name in ("episodes", "rng", "steps", "episode_length", "episode_return"):
    assert C[name].shape == (4,), (name, C[name].shape)
assert list(C["steps"][()]) == [32] * 4, C["steps"][()]
assert C["actions"].shape == (int(C["episode_length"][()].sum()), 1), C["actions"].shape
assert set(C["actions"][()].ravel()) <= {0.0, 1.0}
for k, v in {"format": "fibra.rl.PpoTrainer/1", "env": "CartPole-v1", "copies": "4", "workers": "2",
             "fragment_steps": "16", "hidden": "16,16", "activation": "tanh", "ppo.learning_rate": "0.001",
             "ppo.epochs": "2", "ppo.seed": "11", "ppo.target_kl": "none"}.items():
    assert attr(k) == v, (k, attr(k), v)
print("h5py read the file")
)";
  const int rc = std::system((python + " " + script + " " + path).c_str());
  EXPECT_EQ(rc, 0) << "h5py's checks of " << path << " failed (its assertion is printed above)";
}

// A user's torch network (rl/tests/user_policy/shared_torso.cpp) on rollout workers in other
// processes: they open the library by the spec's path (a spec that did not carry it would make
// them refuse the weights' size), the learner trains it, and the file names its parameters as the
// module does.
TEST(Trainer, AUserNetworkTrainsOnRolloutWorkers) {
  const std::string python = FIBRA_TEST_PYTHON;
  if (python.empty() || std::system((python + " -c 'import h5py' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "no python3 with h5py: apt-get install python3-h5py";
  const std::string path = scratch("user_network.h5"), script = scratch("check_user_network.py");
  rl::TrainerOptions o = small(2, 2);
  o.torch_module = FIBRA_RL_TEST_POLICY;
  {
    rl::PpoTrainer t(o);
    const std::vector<float> before = t.weights().params;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(t.train().lost_fragments, 0u) << "iteration " << i;
    EXPECT_NE(t.weights().params, before) << "the learner did not move the user's network";
    t.save(path);
  }
  std::ofstream(script) << R"(import sys, h5py
f = h5py.File(sys.argv[1], "r")
L = f["learner"]
for name, shape in {"torso.0.weight": (16, 4), "torso.2.bias": (16,), "actor.weight": (2, 16), "critic.bias": (1,),
                    "adam.exp_avg.torso.0.weight": (16, 4)}.items():
    assert L[name].shape == shape, (name, L[name].shape, shape)
v = f.attrs["torch_module"]
assert (v.decode() if isinstance(v, bytes) else v) == sys.argv[2], v
print("h5py read the user network's file")
)";
  const int rc = std::system((python + " " + script + " " + path + " " + FIBRA_RL_TEST_POLICY).c_str());
  EXPECT_EQ(rc, 0) << "h5py's checks of " << path << " failed (its assertion is printed above)";
}

TEST(Trainer, RefusesToResumeAnotherRun) {
  const std::string path = scratch("other.h5");
  {
    rl::PpoTrainer t(small(2, 2));
    t.save(path);  // (before any iteration: a file all the same)
  }
  rl::TrainerOptions o = small(2, 2);
  o.resume_from = path;
  o.ppo.learning_rate = 0.002;
  o.hidden = {32, 16};
  try {
    rl::PpoTrainer t(o);
    ADD_FAILURE() << "a run of another learning rate and net resumed";
  } catch (const fibra::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "fibra::rl::PpoTrainer: cannot resume '" + path +
                                         "': it was written by a run with hidden 16,16 (now 32,16), "
                                         "ppo.learning_rate 0.001 (now 0.002); rerun with those options, or resume "
                                         "from another file");
  }
  o = small(3, 2);
  o.resume_from = path;
  try {
    rl::PpoTrainer t(o);
    ADD_FAILURE() << "a run of 6 copies resumed from one of 4";
  } catch (const fibra::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "fibra::rl::PpoTrainer: cannot resume '" + path +
                                         "': it was written by a run with copies (workers x envs_per_worker) 4 "
                                         "(now 6); rerun with those options, or resume from another file");
  }
  o = small(2, 2);
  o.resume_from = path + ".none";
  EXPECT_THROW(rl::PpoTrainer{o}, fibra::CheckpointError);
}

// A file written before TrainerOptions::async_learning_rate existed lacks its attribute: a
// synchronous run's resumes (it learned at none), an asynchronous run's too when its
// ppo.learning_rate is the rate asked for now (the one it learned at), and is refused otherwise.
// A trainer file of `o`'s run at `path`, as a build from before `attribute` existed wrote it.
void save_without(const rl::TrainerOptions& o, const std::string& path, const char* attribute) {
  {
    rl::PpoTrainer t(o);
    t.save(path);
  }
  fibra::hdf5_io::TableFile f = fibra::hdf5_io::read_table_file(path);
  EXPECT_EQ(f.attributes.erase(attribute), 1u) << "the file names " << attribute;
  fibra::hdf5_io::write_table_file(path, f);
}

TEST(Trainer, AFileFromBeforeTheAsynchronousLearningRateResumes) {
  for (const bool asynchronous : {false, true}) {
    const std::string path = scratch(asynchronous ? "old-async.h5" : "old-sync.h5");
    rl::TrainerOptions o = small(2, 2);
    o.asynchronous = asynchronous;
    save_without(o, path, "async_learning_rate");
    o.resume_from = path;
    if (asynchronous) o.async_learning_rate = o.ppo.learning_rate;
    EXPECT_NO_THROW(rl::PpoTrainer{o}) << (asynchronous ? "asynchronous" : "synchronous");
    if (!asynchronous) continue;
    o.async_learning_rate = o.ppo.learning_rate / 2;
    try {
      rl::PpoTrainer t(o);
      ADD_FAILURE() << "an asynchronous run resumed at another learning rate";
    } catch (const fibra::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("async_learning_rate 0.001 (now 5e-04)"), std::string::npos) << e.what();
    }
  }
}

// The asynchronous learner learns with async_ent_coef's bonus (0.01 unless set), the synchronous
// one with ppo.ent_coef's; a file from before async_ent_coef resumes when the bonus asked for is
// the one its asynchronous learner had (ppo.ent_coef), and is refused otherwise, naming the field.
TEST(Trainer, TheAsynchronousLearnerHasItsOwnEntropyBonus) {
  rl::TrainerOptions o = small(2, 2);
  EXPECT_EQ(rl::PpoTrainer{o}.learner().config().ent_coef, 0.0) << "synchronous: ppo.ent_coef";
  o.asynchronous = true;
  EXPECT_EQ(rl::PpoTrainer{o}.learner().config().ent_coef, 0.01) << "asynchronous: async_ent_coef's default";
  const std::string path = scratch("old-async-entropy.h5");
  save_without(o, path, "async_ent_coef");
  o.resume_from = path;
  try {
    rl::PpoTrainer t(o);
    ADD_FAILURE() << "a file whose asynchronous learner had no entropy bonus resumed with one";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("async_ent_coef 0 (now 0.01)"), std::string::npos) << e.what();
  }
  o.async_ent_coef = o.ppo.ent_coef;
  EXPECT_NO_THROW(rl::PpoTrainer{o}) << "the bonus it had";
  o.resume_from.clear();
  o.async_ent_coef = -1;
  EXPECT_THROW(rl::PpoTrainer{o}, fibra::ConfigError);
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
