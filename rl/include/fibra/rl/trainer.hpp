// fibra/rl/trainer.hpp: PPO on fibra's actors, RLlib's PPO with its rollout workers.
//
//   fibra::Runtime rt(argc, argv);
//   fibra::rl::PpoTrainer trainer({.env = "CartPole-v1", .workers = 4, .envs_per_worker = 2});
//   for (;;) {
//     fibra::rl::Iteration it = trainer.train();   // weights out, a fragment from each worker, PPO
//     if (it.mean_return >= 475) break;
//   }
//   fibra::rl::EvalResult e = trainer.evaluate(100);  // greedy episodes in the driver
//
// Each iteration the learner's weights go out once (fibra::put: one copy per host), each rollout
// actor steps its M environment copies T steps with them (a fragment: episodes go on across
// iterations, so one long episode stalls nobody) and sends the fragment back as contiguous arrays,
// and the learner (libtorch, in the driver only: rl/torch) takes PPO's epochs over the whole batch.
//
// The batch is the same whatever the number of workers: copy i of the W x M is seeded from the
// run's seed and i alone, and the learner orders its rows by copy, so a seed gives the same curve
// on 1 worker of 8 copies as on 4 of 2.
//
// A rollout actor that crashes, is killed, or runs past sample_timeout_s costs its fragment: it is
// restarted from its constructor (its copies start new episodes) and the iteration goes on with the
// others' fragments (Iteration::lost_fragments). No wait is without a bound.
//
// Asynchronous (TrainerOptions::asynchronous, IMPALA's and APPO's idea): each rollout actor keeps
// async_calls_per_worker sampling calls queued, so it never waits for the learner; each train()
// takes the fragments that have come (waiting for the first; none if every worker's calls were
// lost, and then nothing is learned), sends their actors the next calls with the
// weights the learner has, and learns from them with V-trace correcting for the lag
// (PpoLearner::learn_vtrace); Iteration::mean_lag and max_lag say how stale they were. Not
// deterministic: what a train() gets depends on timing.
//
// Checkpoints: save(path) writes the whole run in one HDF5 file (the learner's weights as datasets
// named by layer, Adam, the normaliser, the counters, where every environment copy is), and a
// trainer made with TrainerOptions::resume_from = path goes on from it: a run stopped after k
// iterations and resumed gives the uninterrupted run's weights and curve, bit for bit, on any
// number of workers with the same number of copies (docs/rl.md, "Checkpoints and resume").
//
//   trainer.save("run.h5");            // between iterations
//   options.resume_from = "run.h5";    // the same options otherwise
//   fibra::rl::PpoTrainer again(options);
#pragma once

#include <fibra/rl/policy.hpp>
#include <fibra/rl/ppo.hpp>
#include <fibra/rl/sampler.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fibra {
class Pool;
}

namespace fibra::rl {

/// @brief A PpoTrainer's settings.
struct TrainerOptions {
  std::string env = "CartPole-v1";  ///< a name of make_env (built in, or registered with FIBRA_ENV)
  int workers = 2;                  ///< rollout actors
  int envs_per_worker = 4;          ///< environment copies each actor steps (M)
  int fragment_steps = 32;          ///< steps of each copy per iteration (T)
  std::vector<int> hidden{64, 64};  ///< the actor's and the critic's hidden layers
  Activation activation = Activation::tanh;
  /// A user's network in place of the built-in MLPs (PolicySpec::torch_module: an absolute path
  /// every host can read); rollout workers then load libtorch (docs/rl.md). Empty: the built-in.
  std::string torch_module{};
  PpoConfig ppo{};  ///< the learner's settings; its seed seeds the weights, the copies and the shuffles
  /// A rollout actor whose fragment takes longer is killed (its pool's task limit), restarted, and
  /// its fragment counted lost. Used when the trainer makes its own pool.
  double sample_timeout_s = 60;
  /// How often each rollout actor may die before train() gives up (throws, naming it).
  int max_restarts = 100;
  /// Where the rollout actors run: nullptr for a pool of the trainer's own (one worker, task limit
  /// sample_timeout_s). A pool given here keeps its own PoolOptions::task_timeout_s.
  fibra::Pool* pool = nullptr;
  /// A file written by PpoTrainer::save to go on from: the learner, the counters and every copy's
  /// episode are restored. The run's configuration (every field above but sample_timeout_s,
  /// max_restarts and pool; workers and envs_per_worker only through their product, the number of
  /// copies) must be the file's: ConfigError naming each field that differs. Empty: a new run.
  std::string resume_from;
  /// IMPALA/APPO: the rollout workers never wait for the learner, which corrects the fragments'
  /// lag with V-trace (rho-bar and c-bar 1, lambda ppo.gae_lambda) and takes async_epochs of
  /// PPO's clipped steps on each batch. False: synchronous PPO, one fragment from every worker an
  /// iteration.
  bool asynchronous = false;
  /// Sampling calls each worker has queued when asynchronous (2: one runs while the next waits).
  int async_calls_per_worker = 2;
  /// Epochs over each asynchronous batch (ppo.epochs is synchronous PPO's): 4 solved CartPole-v1
  /// where the synchronous 20 plateaued (fragments a step stale, learned from 20 times over).
  int async_epochs = 4;
  /// The asynchronous learner's learning rate (ppo.learning_rate is synchronous PPO's; annealed as
  /// ppo.anneal_lr says). At synchronous PPO's 1e-3, 4 of 26 CartPole-v1 runs on a loaded machine
  /// collapsed (a mean return of 180-360 falling to about 100 for good); at 5e-4, 14 of 14 solved
  /// (docs/rl.md).
  double async_learning_rate = 5e-4;
  /// The asynchronous learner's entropy bonus (ppo.ent_coef is synchronous PPO's, 0): RLlib's
  /// IMPALA and APPO default, 0.01. Without it, 2 of 30 CartPole-v1 runs under load rose to a mean
  /// return of 130-280, then fell into a near-deterministic policy that ends every episode near
  /// step 100 (greedy 94-96 +- 3) and stayed there to the end of the budget; with it 28 of 28
  /// solved, one of them after 500,000 steps in that state (docs/rl.md).
  double async_ent_coef = 0.01;
};

/// @brief What one train() did.
struct Iteration {
  std::uint64_t iteration = 0;     ///< 1 for the first
  std::uint64_t env_steps = 0;     ///< environment steps sampled so far, all iterations
  std::size_t fragments = 0;       ///< fragments the learner got this iteration
  std::size_t lost_fragments = 0;  ///< fragments lost this iteration (their actor died or hung)
  std::uint64_t restarts = 0;      ///< rollout actors restarted so far
  std::size_t episodes = 0;        ///< episodes that ended this iteration
  /// Their returns, in (step, global copy) order: the same for any split of the copies.
  std::vector<double> episode_returns;
  /// Mean return of the last 100 episodes that ended (SB3's ep_rew_mean); NaN before the first.
  double mean_return = 0;
  double sample_s = 0;     ///< from the weights going out to the last fragment back
  double learn_s = 0;      ///< the learner's update
  double steps_per_s = 0;  ///< this iteration's steps over its whole time
  LearnStats learn{};      ///< the learner's figures (losses, KL, clip fraction...)
  /// Asynchronous: how many learner updates behind its fragments' weights were, on average and at
  /// most (0 for synchronous PPO).
  double mean_lag = 0;
  std::uint64_t max_lag = 0;
};

/// @brief One round of sampling: a fragment from every rollout actor that delivered.
struct SampleRound {
  std::vector<Fragment> fragments;  ///< in copy order
  std::size_t lost = 0;             ///< actors that died or hung (each restarted)
  double seconds = 0;               ///< from the weights going out to the last fragment back
};

/// @brief Synchronous PPO over rollout actors (RLlib's PPO). Runs in the driver, inside a
/// fibra::Runtime; the rollout actors run on the pool, the learner in this process.
class PpoTrainer {
 public:
  /// @brief Makes the learner (loads its libtorch module: ConfigError if it cannot) and starts the
  /// rollout actors; with options.resume_from, restores the saved run into them (each actor
  /// replays its copies' episodes in progress). @throws ConfigError for bad options (naming the
  /// option and its range) or a file written by a run of another configuration (naming each field
  /// that differs, before any process starts); CheckpointError for a file that is missing or not a
  /// PpoTrainer's, or a replay that fails; Hdf5Error for one HDF5 cannot read.
  explicit PpoTrainer(TrainerOptions options);
  ~PpoTrainer();
  PpoTrainer(const PpoTrainer&) = delete;
  PpoTrainer& operator=(const PpoTrainer&) = delete;

  /// @brief One iteration: sample(), then PPO's update from the fragments that came (asynchronous:
  /// the fragments that have come, waiting for the first, and learn_vtrace).
  /// @throws Error if an actor lost max_restarts + 1 fragments in a row.
  Iteration train();
  /// @brief Sampling alone (train()'s first half; B12 measures it): the current weights to every
  /// actor once (fibra::put), a fragment of fragment_steps steps from each. Nothing is learned.
  /// @throws Error as train().
  SampleRound sample();
  /// @brief `episodes` greedy episodes of the current weights, in the driver (rl::evaluate, with
  /// the run's seed).
  EvalResult evaluate(int episodes, bool greedy = true) const;

  /// @brief Writes the run's state to `path`, one HDF5 file that h5py reads (docs/rl.md has its
  /// layout), atomically: a reader, or a process killed meanwhile, sees the old file or the new one
  /// whole. Call it between iterations; it asks every rollout actor where its copies are (one
  /// call each, bounded by sample_timeout_s as sample() is).
  /// @throws Hdf5Error if the file cannot be written; Error as train() if an actor does not answer.
  void save(const std::string& path);

  /// @brief Iterations done so far (after a resume: those of the run it resumed too).
  std::uint64_t iteration() const;
  /// @brief Environment steps sampled so far, over all iterations.
  std::uint64_t env_steps() const;
  /// @brief The returns of the last 100 episodes that ended, oldest first (Iteration::mean_return's).
  std::vector<double> recent_returns() const;

  const PolicySpec& spec() const;
  /// @brief The learner's current weights (what the next iteration sends out).
  PolicyWeights weights() const;
  /// @brief The learner itself (its state() for checkpoints).
  PpoLearner& learner();
  const TrainerOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::rl
