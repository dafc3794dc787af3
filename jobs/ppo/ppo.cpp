// PPO (fibra::rl) on rollout actors: CartPole-v1, Acrobot-v1 or Pendulum-v1.
//
//   ppo [--env cartpole|acrobot|pendulum|<a registered name>] [--workers 4] [--envs-per-worker 2]
//       [--steps 32] [--total-steps N] [--lr L] [--epochs E] [--minibatch B] [--seed 1]
//       [--target T] [--eval-episodes 100] [--window 20] [--csv PATH]
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
#include <fibra/fibra.hpp>
#include <fibra/rl.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

namespace {

struct Options {
  std::string env = "CartPole-v1";
  fibra::rl::TrainerOptions trainer;
  std::optional<double> target;
  long long total_steps = 0;  // 0: the environment's default budget
  int eval_episodes = 100;
  int window = 20;  // the episodes whose mean return is checked against the target
  std::string csv = "ppo.csv";
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "ppo: %s\nusage: ppo [--env cartpole|acrobot|pendulum|NAME] [--workers N] [--envs-per-worker M] "
               "[--steps T] [--total-steps N] [--lr L] [--epochs E] [--minibatch B] [--seed S] [--target T] "
               "[--eval-episodes E] [--window W] [--csv PATH]\n",
               why.c_str());
  std::exit(2);
}

std::string env_name(const std::string& v) {
  if (v == "cartpole") return "CartPole-v1";
  if (v == "acrobot") return "Acrobot-v1";
  if (v == "pendulum") return "Pendulum-v1";
  return v;  // a registered name: make_env says if it is not
}

Options parse(int argc, char** argv) {
  Options o;
  o.trainer.workers = 4;
  o.trainer.envs_per_worker = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--async")
      usage("--async (the asynchronous V-trace learner, issue 47 item 5) is not built yet; run without it");
    if (i + 1 >= argc) usage("'" + a + "' needs a value");
    const char* v = argv[++i];
    if (a == "--env") {
      o.env = env_name(v);
      continue;
    }
    if (a == "--csv") {
      o.csv = v;
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
      o.trainer.ppo.learning_rate = x;
    else if (a == "--epochs")
      o.trainer.ppo.epochs = int(whole(1));
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
    else
      usage("unknown option '" + a + "'");
  }
  o.trainer.env = o.env;
  if (!o.target) {
    if (o.env == "CartPole-v1") o.target = 475;
    if (o.env == "Acrobot-v1") o.target = -100;
  }
  if (o.total_steps == 0) o.total_steps = o.env == "Pendulum-v1" ? 1'000'000 : 500'000;
  o.trainer.ppo.total_steps = o.total_steps;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const Options o = parse(argc, argv);
  std::FILE* csv = std::fopen(o.csv.c_str(), "w");
  if (!csv) {
    std::fprintf(stderr, "ppo: cannot write %s: %s (give another --csv)\n", o.csv.c_str(), std::strerror(errno));
    return 2;
  }
  std::fprintf(csv, "iteration,env_steps,wall_s,mean_return,sample_s,learn_s,lost\n");
  const auto t_start = std::chrono::steady_clock::now();
  fibra::rl::PpoTrainer trainer(o.trainer);
  const double start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf(
      "ppo: %s, %d rollout workers x %d copies, fragments of %d steps (%d steps an iteration), budget %lld "
      "steps, seed %llu, target %s (started in %.2f s)\n",
      o.env.c_str(), o.trainer.workers, o.trainer.envs_per_worker, o.trainer.fragment_steps,
      o.trainer.workers * o.trainer.envs_per_worker * o.trainer.fragment_steps, o.total_steps,
      (unsigned long long)o.trainer.ppo.seed, o.target ? std::to_string(*o.target).c_str() : "none", start_s);
  std::fflush(stdout);

  const auto t0 = std::chrono::steady_clock::now();
  std::optional<fibra::rl::EvalResult> eval;
  bool solved = false;
  fibra::rl::Iteration it;
  std::deque<double> recent;  // the returns of the last --window episodes
  while (it.env_steps < static_cast<std::uint64_t>(o.total_steps) && !solved) {
    it = trainer.train();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("iteration %4llu: steps %8llu  mean return %8.2f  %7.0f steps/s  sample %.3f s  learn %.3f s%s\n",
                (unsigned long long)it.iteration, (unsigned long long)it.env_steps, it.mean_return, it.steps_per_s,
                it.sample_s, it.learn_s,
                it.lost_fragments ? ("  lost " + std::to_string(it.lost_fragments) + " fragments").c_str() : "");
    std::fprintf(csv, "%llu,%llu,%.3f,%.3f,%.4f,%.4f,%zu\n", (unsigned long long)it.iteration,
                 (unsigned long long)it.env_steps, wall, it.mean_return, it.sample_s, it.learn_s, it.lost_fragments);
    std::fflush(csv);
    std::fflush(stdout);
    for (double r : it.episode_returns) {
      recent.push_back(r);
      if (recent.size() > static_cast<std::size_t>(o.window)) recent.pop_front();
    }
    const double window_mean = recent.size() == static_cast<std::size_t>(o.window)
                                   ? std::accumulate(recent.begin(), recent.end(), 0.0) / double(o.window)
                                   : -std::numeric_limits<double>::infinity();
    if (o.target && window_mean >= *o.target) {
      eval = trainer.evaluate(o.eval_episodes);
      solved = eval->mean >= *o.target;
      std::printf("  greedy policy over %d episodes: %.2f +- %.2f%s\n", o.eval_episodes, eval->mean, eval->std,
                  solved ? ": solved" : "");
    }
  }
  std::fclose(csv);
  if (!eval || !solved) eval = trainer.evaluate(o.eval_episodes);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("mean return %.2f +- %.2f over %d episodes\n", eval->mean, eval->std, o.eval_episodes);
  if (!o.target) {
    std::printf("ppo: %s has no threshold: %llu steps in %.2f s reached the mean above\n", o.env.c_str(),
                (unsigned long long)it.env_steps, wall);
    return 0;
  }
  solved = eval->mean >= *o.target;
  std::printf("ppo: %s %s in %llu environment steps, %.2f s (target %g); curve in %s\n", o.env.c_str(),
              solved ? "solved" : "not solved", (unsigned long long)it.env_steps, wall, *o.target, o.csv.c_str());
  return solved ? 0 : 1;
}
