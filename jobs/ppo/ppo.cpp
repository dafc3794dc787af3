// PPO (fibra::rl) on rollout actors: CartPole-v1, Acrobot-v1, Pendulum-v1, and where fibra was built
// with MuJoCo, Hopper-v4, HalfCheetah-v4 and Humanoid-v4 (fibra/rl/mujoco.hpp).
//
//   ppo [--env cartpole|acrobot|pendulum|hopper|halfcheetah|humanoid|<a registered name>] [--workers 4]
//   [--envs-per-worker 2]
//       [--steps 32] [--total-steps N] [--lr L] [--epochs E] [--minibatch B] [--target-kl K] [--ent-coef C]
//       [--seed 1]
//       [--target T] [--eval-episodes 100] [--window 20] [--csv PATH] [--state PATH] [--save-every 0]
//       [--async] [--async-calls 2] [--torch-module /abs/path/libmy_policy.so] [--reward-clip C]
//
// Each iteration the learner's weights go to every rollout actor, each steps its copies --steps
// steps and sends its fragment back, and PPO updates the weights (fibra/rl/trainer.hpp). A line per
// iteration: environment steps so far, the mean return of the last 100 episodes, steps/s, and the
// time sampling and learning. When the mean of the last --window episodes (20) reaches the target,
// the policy plays --eval-episodes greedy episodes in the driver; it is solved when their mean
// does too (benchmarks/peers/ppo_peer.py stops by the same rule). The run then ends with
//   mean return X +- Y over 100 episodes
// and exits 0 if the target was reached (1 if not). Pendulum-v1 has no threshold in Gymnasium: it
// runs --total-steps and exits 0, saying what it reached (give --target to set one).
// The CSV has a row per iteration: iteration,env_steps,wall_s,mean_return,sample_s,learn_s,lost.
//
// The MuJoCo bodies (hopper, halfcheetah, humanoid) get the settings PPO is usually run with on them (CleanRL's
// ppo_continuous_action.py), where no option says otherwise: 2,048 steps an iteration (4 workers x
// 1 copy x 512 steps), 10 epochs of minibatches of 64, learning rate 3e-4, gamma 0.99, lambda
// 0.95, 1,000,000 steps, rewards normalised (by the running deviation of the discounted return) and
// clipped to +-10 (--reward-clip C sets the clip, 0 turns it off; other environments have it off
// unless given); no threshold (Gymnasium's Hopper-v4 names 3,800: give --target to set one).
//
// --async: the asynchronous learner (IMPALA/APPO): the workers never wait for the learner, which
// learns from the fragments that have come with V-trace correcting their lag (4 epochs each, not
// 20: TrainerOptions::async_epochs, --epochs sets it; a learning rate of 5e-4, not 1e-3:
// TrainerOptions::async_learning_rate, --lr sets it; an entropy bonus of 0.01, not 0:
// TrainerOptions::async_ent_coef, --ent-coef sets it); each line says how
// many fragments an update took and how many updates behind their weights were. Not bit for bit
// from one run to the next (what an update gets depends on timing), resumed or not.
//
// Checkpoints: with --state PATH (else $FIBRA_CHECKPOINT, which `fibra slurm submit` sets) the
// whole run is saved in that HDF5 file after an iteration, as often as keeps saving under 5% of
// the run's time (--save-every K: every K iterations instead), and when the run ends. A rerun with
// the same options resumes from it (`ppo: resuming from PATH after iteration k`), on any number
// of workers with the same number of copies, and goes on as the run never stopped would, bit for
// bit (weights and curve; the CSV keeps its rows up to k). SIGTERM or SIGUSR1 (what `fibra slurm`
// sends before the time limit) make it finish the iteration under way, save, and exit 75 for
// `fibra slurm` to requeue the job; without a state file they end it as usual.
//
// For the tests: $FIBRA_PPO_KILL_AFTER=k makes the driver SIGKILL itself once an iteration from k on
// is saved (with --save-every 1: right after iteration k).
#include <fibra/detail/checkpoint.hpp>  // SIGTERM/SIGUSR1: fibra's stop, as fibra::tune uses it
#include <fibra/fibra.hpp>
#include <fibra/rl.hpp>
#ifdef FIBRA_JOBS_MUJOCO
#include <fibra/rl/mujoco.hpp>
#endif

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string env = "CartPole-v1";
  fibra::rl::TrainerOptions trainer;
  std::optional<double> target;
  long long total_steps = 0;  // 0: the environment's default budget
  int eval_episodes = 100;
  int window = 20;  // the episodes whose mean return is checked against the target
  std::string csv = "ppo.csv";
  std::string state;            // the checkpoint: --state, else $FIBRA_CHECKPOINT; empty: none
  int save_every = 0;           // 0: when saving costs at most 5% of the time (Saver)
  std::set<std::string> given;  // the options given on the command line
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "ppo: %s\nusage: ppo [--env cartpole|acrobot|pendulum|hopper|halfcheetah|humanoid|NAME] [--workers N] "
      "[--envs-per-worker M] "
      "[--steps T] [--total-steps N] [--lr L] [--epochs E] [--minibatch B] [--target-kl K] [--ent-coef C] [--seed S] "
      "[--target T] "
      "[--eval-episodes E] [--window W] [--csv PATH] [--state PATH] [--save-every K] [--async] "
      "[--async-calls C] [--torch-module PATH] [--reward-clip C]\n",
      why.c_str());
  std::exit(2);
}

std::string env_name(const std::string& v) {
  if (v == "cartpole") return "CartPole-v1";
  if (v == "acrobot") return "Acrobot-v1";
  if (v == "pendulum") return "Pendulum-v1";
  if (v == "hopper") return "Hopper-v4";
  if (v == "halfcheetah") return "HalfCheetah-v4";
  if (v == "humanoid") return "Humanoid-v4";
  return v;  // a registered name: make_env says if it is not
}

Options parse(int argc, char** argv) {
  Options o;
  o.trainer.workers = 4;
  o.trainer.envs_per_worker = 2;
  if (const char* c = std::getenv("FIBRA_CHECKPOINT"); c && *c) o.state = c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--async") {
      o.trainer.asynchronous = true;
      continue;
    }
    if (i + 1 >= argc) usage("'" + a + "' needs a value");
    const char* v = argv[++i];
    o.given.insert(a);
    if (a == "--env") {
      o.env = env_name(v);
      continue;
    }
    if (a == "--csv") {
      o.csv = v;
      continue;
    }
    if (a == "--state") {
      o.state = v;
      continue;
    }
    if (a == "--torch-module") {  // a user's network (fibra/rl/torch_policy.hpp) in place of the MLPs
      o.trainer.torch_module = v;
      continue;
    }
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (!end || *end != '\0' || end == v) usage("'" + a + "' takes a number, not '" + v + "'");
    const auto whole = [&](double lo) {
      if (x < lo || x != std::floor(x))
        usage("'" + a + "' takes a whole number of at least " + std::to_string(int(lo)));
      return static_cast<long long>(x);
    };
    if (a == "--workers")
      o.trainer.workers = int(whole(1));
    else if (a == "--envs-per-worker")
      o.trainer.envs_per_worker = int(whole(1));
    else if (a == "--steps")
      o.trainer.fragment_steps = int(whole(1));
    else if (a == "--total-steps")
      o.total_steps = whole(1);
    else if (a == "--lr")
      o.trainer.ppo.learning_rate = o.trainer.async_learning_rate = x;  // (the one the run uses)
    else if (a == "--epochs")
      o.trainer.ppo.epochs = o.trainer.async_epochs = int(whole(1));  // (the one the run uses)
    else if (a == "--async-calls")
      o.trainer.async_calls_per_worker = int(whole(1));
    else if (a == "--target-kl")
      o.trainer.ppo.target_kl = x;
    else if (a == "--ent-coef" && x < 0)
      usage("'--ent-coef' takes 0 (no entropy bonus) or more");
    else if (a == "--ent-coef")
      o.trainer.ppo.ent_coef = o.trainer.async_ent_coef = x;  // (the one the run uses)
    else if (a == "--minibatch")
      o.trainer.ppo.minibatch_size = int(whole(1));
    else if (a == "--seed")
      o.trainer.ppo.seed = static_cast<std::uint64_t>(whole(0));
    else if (a == "--target")
      o.target = x;
    else if (a == "--eval-episodes")
      o.eval_episodes = int(whole(1));
    else if (a == "--window")
      o.window = int(whole(1));
    else if (a == "--save-every")
      o.save_every = int(whole(0));
    else if (a == "--reward-clip") {  // rewards normalised and clipped to +-x; 0: not normalised
      if (x < 0) usage("'--reward-clip' takes 0 (rewards as they are) or a clip above 0");
      o.trainer.ppo.normalise_rewards = x > 0, o.trainer.ppo.reward_clip = x;
    } else
      usage("unknown option '" + a + "'");
  }
  o.trainer.env = o.env;
  if (o.env == "Hopper-v4" || o.env == "HalfCheetah-v4" ||
      o.env == "Humanoid-v4") {  // CleanRL's continuous-control settings
    const auto unless = [&](const char* option, auto& field, auto value) {
      if (!o.given.contains(option)) field = value;
    };
    unless("--envs-per-worker", o.trainer.envs_per_worker, 1);
    // 2,048 steps an iteration, or the nearest whole number of steps a copy (at least 1 each).
    unless("--steps", o.trainer.fragment_steps, std::max(1, 2048 / (o.trainer.workers * o.trainer.envs_per_worker)));
    unless("--epochs", o.trainer.ppo.epochs, 10);
    unless("--epochs", o.trainer.async_epochs, 10);  // (--async's; --epochs sets both)
    unless("--minibatch", o.trainer.ppo.minibatch_size, 64);
    unless("--lr", o.trainer.ppo.learning_rate, 3e-4);
    unless("--lr", o.trainer.async_learning_rate, 3e-4);
    o.trainer.ppo.gamma = 0.99;
    o.trainer.ppo.gae_lambda = 0.95;
    o.trainer.ppo.anneal_clip = false;
    if (!o.given.contains("--reward-clip")) o.trainer.ppo.normalise_rewards = true;  // CleanRL's NormalizeReward
    if (o.total_steps == 0) o.total_steps = 1'000'000;
  }
  if (o.window > 100) usage("--window takes 1 to 100 (the trainer keeps the returns of the last 100 episodes)");
  if (!o.target) {
    if (o.env == "CartPole-v1") o.target = 475;
    if (o.env == "Acrobot-v1") o.target = -100;
  }
  if (o.total_steps == 0) o.total_steps = o.env == "Pendulum-v1" ? 1'000'000 : 500'000;
  o.trainer.ppo.total_steps = o.total_steps;
  return o;
}

// The CSV: a new one, or, when resuming after iteration k, the rows up to k of the one there (a
// row is written before its iteration is saved, so rows past k belong to iterations run again).
// `wall_offset` is the last kept row's wall time, which the resumed rows go on from.
std::FILE* open_csv(const std::string& path, std::uint64_t resumed_after, double& wall_offset) {
  std::vector<std::string> kept;
  if (resumed_after > 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      char* end = nullptr;
      const unsigned long long k = std::strtoull(line.c_str(), &end, 10);
      if (end == line.c_str() || *end != ',' || k > resumed_after) continue;  // (the header, or a row redone)
      kept.push_back(line);
      const std::size_t wall_at = line.find(',', line.find(',', 0) + 1);  // the third field: wall_s
      if (wall_at != std::string::npos) wall_offset = std::strtod(line.c_str() + wall_at + 1, nullptr);
    }
  }
  std::FILE* csv = std::fopen(path.c_str(), "w");
  if (!csv) return nullptr;
  std::fprintf(csv, "iteration,env_steps,wall_s,mean_return,sample_s,learn_s,lost\n");
  for (const auto& row : kept) std::fprintf(csv, "%s\n", row.c_str());
  std::fflush(csv);
  return csv;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// When and how the run's state is saved (--state). --save-every 0: once the time since the last
// save is 20 times what that save took, so saving takes at most 5% of the run's time (CartPole-v1's
// default net: 2 to 4 ms a save, 25 ms an iteration, so about every third iteration); K: every K
// iterations. Always when the run ends and on a stop signal.
class Saver {
 public:
  Saver(fibra::rl::PpoTrainer& trainer, const Options& o)
      : trainer_(trainer), path_(o.state), every_(o.save_every), saved_(trainer.iteration()) {}

  bool on() const { return !path_.empty(); }
  bool due(std::uint64_t iteration) const {
    return on() &&
           (every_ > 0 ? iteration % static_cast<std::uint64_t>(every_) == 0 : seconds_since(last_) >= 20 * took_);
  }
  bool holds_the_last_iteration() const { return saved_ == trainer_.iteration(); }
  /// Saves; returns the seconds it took. @throws fibra::Error from PpoTrainer::save.
  double save() {
    const auto t = std::chrono::steady_clock::now();
    trainer_.save(path_);
    saved_ = trainer_.iteration();
    last_ = std::chrono::steady_clock::now();
    took_ = seconds_since(t);
    return took_;
  }

 private:
  fibra::rl::PpoTrainer& trainer_;
  std::string path_;
  int every_;
  std::uint64_t saved_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  double took_ = 0;
};

// The training loop: iterations until the budget is spent or the target reached (then `eval`
// holds the evaluation that reached it), each a line and a CSV row, saved as Saver says. A stop
// signal ends the process here (status 75) once the iteration under way is saved.
void train(const Options& o, fibra::rl::PpoTrainer& trainer, Saver& saver, std::FILE* csv, double wall_offset,
           std::optional<fibra::rl::EvalResult>& eval, bool& solved) {
  const auto t0 = std::chrono::steady_clock::now();
  std::deque<double> recent;  // the returns of the last --window episodes
  const auto remember = [&](const std::vector<double>& returns) {
    for (double r : returns) {
      recent.push_back(r);
      if (recent.size() > static_cast<std::size_t>(o.window)) recent.pop_front();
    }
  };
  // When the last --window episodes reach the target, the greedy policy is evaluated; it is solved
  // when that mean does too. (A resumed run looks at the window it resumed with first.)
  const auto check = [&] {
    if (!o.target || recent.size() < static_cast<std::size_t>(o.window)) return;
    if (std::accumulate(recent.begin(), recent.end(), 0.0) / double(o.window) < *o.target) return;
    eval = trainer.evaluate(o.eval_episodes);
    solved = eval->mean >= *o.target;
    std::printf("  greedy policy over %d episodes: %.2f +- %.2f%s\n", o.eval_episodes, eval->mean, eval->std,
                solved ? ": solved" : "");
  };
  remember(trainer.recent_returns());
  if (trainer.iteration() > 0) check();
  while (trainer.env_steps() < static_cast<std::uint64_t>(o.total_steps) && !solved) {
    const fibra::rl::Iteration it = trainer.train();
    // (the row before the save: a rerun keeps the rows up to the iteration it resumes after)
    std::fprintf(csv, "%llu,%llu,%.3f,%.3f,%.4f,%.4f,%zu\n", (unsigned long long)it.iteration,
                 (unsigned long long)it.env_steps, wall_offset + seconds_since(t0), it.mean_return, it.sample_s,
                 it.learn_s, it.lost_fragments);
    std::fflush(csv);
    const bool stop = fibra::detail::stop_signal() != 0;
    const bool last = trainer.env_steps() >= static_cast<std::uint64_t>(o.total_steps);
    char saving[32] = "";
    if (saver.on() && (saver.due(it.iteration) || stop || last)) {
      std::snprintf(saving, sizeof saving, "  save %.1f ms", saver.save() * 1e3);
      // For the tests: $FIBRA_PPO_KILL_AFTER=k kills this driver as a lost node or the OOM killer
      // would (SIGKILL, nothing flushed) once an iteration from k on is saved.
      if (const char* k = std::getenv("FIBRA_PPO_KILL_AFTER"); k && it.iteration >= std::strtoull(k, nullptr, 10))
        ::raise(SIGKILL);
    }
    // Printed once saved: a kill after this line loses nothing of this iteration.
    char lag[48] = "";
    if (o.trainer.asynchronous)
      std::snprintf(lag, sizeof lag, "  %zu fragments, lag %.1f (at most %llu)", it.fragments, it.mean_lag,
                    (unsigned long long)it.max_lag);
    std::printf("iteration %4llu: steps %8llu  mean return %8.2f  %7.0f steps/s  sample %.3f s  learn %.3f s%s%s%s\n",
                (unsigned long long)it.iteration, (unsigned long long)it.env_steps, it.mean_return, it.steps_per_s,
                it.sample_s, it.learn_s, lag, saving,
                it.lost_fragments ? ("  lost " + std::to_string(it.lost_fragments) + " fragments").c_str() : "");
    std::fflush(stdout);
    if (stop)
      fibra::detail::exit_for_stop("the run's state after iteration " + std::to_string(it.iteration) + " is in '" +
                                   o.state + "'");
    remember(it.episode_returns);
    check();
  }
  if (saver.on() && !saver.holds_the_last_iteration()) saver.save();  // (solved between two saves)
}

}  // namespace

int main(int argc, char** argv) {
#ifdef FIBRA_JOBS_MUJOCO
  fibra::rl::register_mujoco_envs();  // in every process of the run: the rollout actors make them too
#endif
  fibra::Runtime rt(argc, argv);
  Options o = parse(argc, argv);
  std::error_code ec;
  if (!o.state.empty() && std::filesystem::exists(o.state, ec)) o.trainer.resume_from = o.state;
  const auto t_start = std::chrono::steady_clock::now();
  std::optional<fibra::rl::PpoTrainer> made;
  try {
    made.emplace(o.trainer);
  } catch (const fibra::Error& e) {  // another run's file, a bad option, no libtorch module
    std::fprintf(stderr, "ppo: %s\n", e.what());
    return 2;
  }
  fibra::rl::PpoTrainer& trainer = *made;
  const double start_s = seconds_since(t_start);
  if (!o.trainer.resume_from.empty())
    std::printf("ppo: resuming from %s after iteration %llu\n", o.state.c_str(),
                (unsigned long long)trainer.iteration());
  double wall_offset = 0;
  std::FILE* csv = open_csv(o.csv, trainer.iteration(), wall_offset);
  if (!csv) {
    std::fprintf(stderr, "ppo: cannot write %s: %s (give another --csv)\n", o.csv.c_str(), std::strerror(errno));
    return 2;
  }
  std::printf(
      "ppo: %s, %d rollout workers x %d copies, fragments of %d steps (%d steps an iteration), budget %lld "
      "steps, seed %llu, target %s%s%s (started in %.2f s)\n",
      o.env.c_str(), o.trainer.workers, o.trainer.envs_per_worker, o.trainer.fragment_steps,
      o.trainer.workers * o.trainer.envs_per_worker * o.trainer.fragment_steps, o.total_steps,
      (unsigned long long)o.trainer.ppo.seed, o.target ? std::to_string(*o.target).c_str() : "none",
      o.state.empty() ? "" : ", state ", o.state.c_str(), start_s);
  std::fflush(stdout);

  // With a state file, SIGTERM/SIGUSR1 stop the run once the iteration under way is saved (fibra's
  // stop: status 75). Outside the loop fibra's watcher stops it at once (75): the file then holds
  // every iteration done.
  std::optional<fibra::detail::ActiveCheckpoint> in_loop;
  if (!o.state.empty()) {
    fibra::detail::checkpoint_opened();
    in_loop.emplace();
  }
  Saver saver(trainer, o);
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<fibra::rl::EvalResult> eval;
  bool solved = false;
  try {
    train(o, trainer, saver, csv, wall_offset, eval, solved);
  } catch (const fibra::Error& e) {  // a rollout worker lost too often, an environment's error, a save
    std::fprintf(stderr, "ppo: %s\n", e.what());
    return 2;
  }
  in_loop.reset();
  std::fclose(csv);
  if (!eval || !solved) eval = trainer.evaluate(o.eval_episodes);
  const double wall = wall_offset + seconds_since(t0);
  std::printf("mean return %.2f +- %.2f over %d episodes\n", eval->mean, eval->std, o.eval_episodes);
  if (!o.target) {
    std::printf("ppo: %s has no threshold: %llu steps in %.2f s reached the mean above\n", o.env.c_str(),
                (unsigned long long)trainer.env_steps(), wall);
    return 0;
  }
  solved = eval->mean >= *o.target;
  std::printf("ppo: %s %s in %llu environment steps, %.2f s (target %g); curve in %s\n", o.env.c_str(),
              solved ? "solved" : "not solved", (unsigned long long)trainer.env_steps(), wall, *o.target,
              o.csv.c_str());
  return solved ? 0 : 1;
}
