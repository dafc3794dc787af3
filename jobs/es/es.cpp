// The demo job: OpenAI's evolution strategy (Salimans et al. 2017) learning to control a simulated
// system (jobs/envs: CartPole-v1, Acrobot-v1), each generation one map over the population.
//
//   es [--env cartpole|acrobot] [--workers 4] [--population 256] [--sigma 0.1] [--lr 0.05]
//      [--l2 0.005] [--hidden 16] [--generations 100] [--target <the env's threshold>]
//      [--eval-episodes 100] [--seed 1] [--state PATH] [--csv PATH]
//
// A candidate travels as a noise offset (a perturbation is sigma times a stretch of a shared
// noise table that every process builds from the seed) and comes back as two returns (an
// antithetic pair: theta + and - the same noise, on the same episode). The driver shapes the
// returns into centred ranks, steps Adam on the estimated gradient (with L2 decay), and keeps
// the observations' mean and spread, which the policy normalises its inputs with.
//
// Every number depends on the seed alone (portable generators, an ordered map), so a seed gives
// the same curve on any number of workers. After each generation the whole run (policy,
// optimiser, normalisation, curve) is saved in an HDF5 file (--state, else $FIBRA_CHECKPOINT,
// which `fibra slurm submit` sets); a rerun continues from the last finished generation, and
// ends with the same policy as a run never stopped. Training stops when the population's mean
// return reaches the target and the policy's own mean over --eval-episodes episodes does too.
// It then prints that evaluation; the exit status is 0 only if it reached the target.
//
// For the tests: $FIBRA_ES_KILL_AFTER=k makes the driver SIGKILL itself once generation k is saved.
#include <fibra/fibra.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "envs.hpp"
#include "es_core.hpp"
#include "es_state.hpp"

namespace {

enum Env : int { cartpole = 0, acrobot = 1 };

es::PolicyShape shape_of(int env, int hidden) {
  return env == cartpole ? es::PolicyShape{envs::CartPole::obs_size, hidden, envs::CartPole::actions}
                         : es::PolicyShape{envs::Acrobot::obs_size, hidden, envs::Acrobot::actions};
}

// `policy` holds theta, then the observations' mean, then their standard deviation.
es::PolicyView view_of(const es::PolicyShape& shape, const std::vector<double>& policy) {
  const std::size_t n = shape.parameters(), o = std::size_t(shape.obs);
  if (policy.size() != n + 2 * o) throw std::invalid_argument("es: a policy of the wrong size");
  return {shape, policy.data(), policy.data() + n, policy.data() + n + o};
}

template <class F>
auto on_env(int env, F&& f) {
  return env == cartpole ? f(envs::CartPole{}) : f(envs::Acrobot{});
}

}  // namespace

// One antithetic pair, on a worker: the returns of theta + sigma * eps and theta - sigma * eps on
// one episode (the same for both), eps the table's values at `offset`. Returns r+, r-, the steps
// of both, then the sums and squared sums of what the + episode observed, and how many it did.
std::vector<double> evaluate_pair(int env, int hidden, const std::vector<double>& policy, std::uint64_t noise_seed,
                                  std::uint64_t offset, std::uint64_t episode_seed, double sigma) {
  const es::PolicyShape shape = shape_of(env, hidden);
  const es::PolicyView p = view_of(shape, policy);
  const float* eps = es::NoiseTable::of(noise_seed).at(offset);
  es::ObsSums seen{std::vector<double>(std::size_t(shape.obs)), std::vector<double>(std::size_t(shape.obs)), 0};
  return on_env(env, [&](auto e) {
    using E = decltype(e);
    const auto [up, up_steps] = es::episode<E>(p, episode_seed, eps, sigma, &seen);
    const auto [down, down_steps] = es::episode<E>(p, episode_seed, eps, -sigma, nullptr);
    std::vector<double> out{up, down, double(up_steps + down_steps)};
    out.insert(out.end(), seen.sum.begin(), seen.sum.end());
    out.insert(out.end(), seen.sumsq.begin(), seen.sumsq.end());
    out.push_back(seen.count);
    return out;
  });
}
FIBRA_REMOTE(evaluate_pair);

// One episode of the policy itself, for the evaluation.
double evaluate_policy(int env, int hidden, const std::vector<double>& policy, std::uint64_t episode_seed) {
  const es::PolicyView p = view_of(shape_of(env, hidden), policy);
  return on_env(env, [&](auto e) { return es::episode<decltype(e)>(p, episode_seed, nullptr, 0, nullptr).first; });
}
FIBRA_REMOTE(evaluate_policy);

namespace {

struct Options {
  int env = cartpole;
  int workers = 4, population = 256, hidden = 16, generations = 100, eval_episodes = 100;
  double sigma = 0.1, lr = 0.05, l2 = 0.005, target = 0;
  std::uint64_t seed = 1;
  std::string state, csv;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "es: %s\nusage: es [--env cartpole|acrobot] [--workers N] [--population P (even)] [--sigma S] "
               "[--lr L] [--l2 C] [--hidden H] [--generations G] [--target T] [--eval-episodes E] [--seed S] "
               "[--state PATH] [--csv PATH]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  bool target_set = false;
  if (const char* c = std::getenv("FIBRA_CHECKPOINT"); c && *c) o.state = c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("'" + a + "' needs a value");
    const char* v = argv[++i];
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    const bool number = end && *end == '\0' && end != v;
    auto need_number = [&] {
      if (!number) usage("'" + a + "' takes a number, not '" + v + "'");
    };
    if (a == "--env") {
      if (std::strcmp(v, "cartpole") == 0)
        o.env = cartpole;
      else if (std::strcmp(v, "acrobot") == 0)
        o.env = acrobot;
      else
        usage(std::string("unknown environment '") + v + "' (cartpole or acrobot)");
    } else if (a == "--state")
      o.state = v;
    else if (a == "--csv")
      o.csv = v;
    else {
      need_number();
      if (a == "--workers")
        o.workers = int(x);
      else if (a == "--population")
        o.population = int(x);
      else if (a == "--hidden")
        o.hidden = int(x);
      else if (a == "--generations")
        o.generations = int(x);
      else if (a == "--eval-episodes")
        o.eval_episodes = int(x);
      else if (a == "--sigma")
        o.sigma = x;
      else if (a == "--lr")
        o.lr = x;
      else if (a == "--l2")
        o.l2 = x;
      else if (a == "--target")
        o.target = x, target_set = true;
      else if (a == "--seed")
        o.seed = std::uint64_t(x);
      else
        usage("unknown option '" + a + "'");
    }
  }
  if (o.population < 2 || o.population % 2) usage("--population must be even and at least 2 (antithetic pairs)");
  if (o.hidden < 1 || o.hidden > 256) usage("--hidden must be 1 to 256");
  if (o.workers < 1 || o.generations < 0 || o.eval_episodes < 1 || !(o.sigma > 0) || !(o.lr > 0))
    usage("--workers, --eval-episodes at least 1, --generations at least 0, --sigma and --lr above 0");
  if (!target_set) o.target = o.env == cartpole ? envs::CartPole::solved : envs::Acrobot::solved;
  if (!o.state.empty() && !o.state.ends_with(".h5")) o.state += ".h5";
  if (o.csv.empty()) o.csv = o.env == cartpole ? "es-cartpole.csv" : "es-acrobot.csv";
  return o;
}

// The run as it starts, when nothing was saved: theta small and random, no normalisation yet.
es::RunState fresh(const Options& o, const es::PolicyShape& shape) {
  es::RunState s;
  s.env = o.env == cartpole ? envs::CartPole::name : envs::Acrobot::name;
  s.seed = o.seed;
  s.population = o.population;
  s.hidden = o.hidden;
  s.sigma = o.sigma;
  s.lr = o.lr;
  s.l2 = o.l2;
  es::Random r(es::mix(o.seed, 0x7417));
  s.theta.resize(shape.parameters());
  for (auto& t : s.theta) t = 0.1 * r.normal();
  s.obs_sum.assign(std::size_t(shape.obs), 0.0);
  s.obs_sumsq.assign(std::size_t(shape.obs), 0.0);
  return s;
}

// theta, then the observations' mean and standard deviation so far (0 and 1 before any).
std::vector<double> policy_of(const es::RunState& s) {
  std::vector<double> p = s.theta;
  const std::size_t n = s.obs_sum.size();
  for (std::size_t i = 0; i < n; ++i) p.push_back(s.obs_count > 0 ? s.obs_sum[i] / s.obs_count : 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double m = s.obs_count > 0 ? s.obs_sum[i] / s.obs_count : 0.0;
    const double var = s.obs_count > 0 ? s.obs_sumsq[i] / s.obs_count - m * m : 1.0;
    p.push_back(std::sqrt(std::max(var, 1e-4)));
  }
  return p;
}

struct Evaluation {
  double mean = 0, stddev = 0;
};

Evaluation evaluate(fibra::Pool& pool, const Options& o, const std::vector<double>& policy) {
  std::vector<std::tuple<int, int, std::vector<double>, std::uint64_t>> episodes;
  for (int k = 0; k < o.eval_episodes; ++k)  // seeds apart from training's
    episodes.emplace_back(o.env, o.hidden, policy, es::mix(o.seed, 0xe7a1, std::uint64_t(k)));
  const std::vector<double> r = pool.starmap(evaluate_policy, episodes);
  Evaluation e;
  for (double x : r) e.mean += x / double(r.size());
  for (double x : r) e.stddev += (x - e.mean) * (x - e.mean) / double(r.size());
  e.stddev = std::sqrt(e.stddev);
  return e;
}

// One generation: the population's returns, and the run stepped on from them.
struct Generation {
  double mean = 0, best = -1e300;
  long steps = 0;
};

Generation step(fibra::Pool& pool, const Options& o, const es::PolicyShape& shape, es::RunState& s, es::Adam& adam) {
  const std::size_t n = shape.parameters(), pairs = std::size_t(o.population / 2);
  const std::uint64_t noise_seed = es::mix(o.seed, 0x401e);
  const std::vector<double> policy = policy_of(s);
  std::vector<std::tuple<int, int, std::vector<double>, std::uint64_t, std::uint64_t, std::uint64_t, double>> tasks;
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::uint64_t pair_seed = es::mix(o.seed, std::uint64_t(s.generation), i);
    offsets.push_back(es::NoiseTable::offset(pair_seed, n));
    tasks.emplace_back(o.env, o.hidden, policy, noise_seed, offsets.back(), es::mix(pair_seed, 0xe915), o.sigma);
  }
  const std::vector<std::vector<double>> results = pool.starmap(evaluate_pair, tasks);

  Generation g;
  std::vector<double> returns(2 * pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto& r = results[i];
    returns[i] = r[0];
    returns[pairs + i] = r[1];
    g.steps += long(r[2]);
    const std::size_t obs = std::size_t(shape.obs);
    for (std::size_t k = 0; k < obs; ++k) {
      s.obs_sum[k] += r[3 + k];
      s.obs_sumsq[k] += r[3 + obs + k];
    }
    s.obs_count += r[3 + 2 * obs];
  }
  for (double r : returns) g.mean += r / double(returns.size()), g.best = std::max(g.best, r);

  // The gradient estimate from centred ranks, with L2 decay; Adam climbs it.
  const std::vector<double> ranks = es::centred_ranks(returns);
  const es::NoiseTable& table = es::NoiseTable::of(noise_seed);
  std::vector<double> grad(n, 0.0);
  for (std::size_t i = 0; i < pairs; ++i) {
    const double w = ranks[i] - ranks[pairs + i];
    const float* eps = table.at(offsets[i]);
    for (std::size_t j = 0; j < n; ++j) grad[j] += w * double(eps[j]);
  }
  for (std::size_t j = 0; j < n; ++j) grad[j] = grad[j] / double(returns.size()) - o.l2 * s.theta[j];
  adam.step(s.theta, grad, o.lr);
  s.adam_m = adam.m;
  s.adam_v = adam.v;
  s.adam_t = adam.t;
  return g;
}

void write_csv(const std::string& path, const es::RunState& s) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "es: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  std::fprintf(f, "generation,mean,best,wall_s\n");
  for (std::size_t r = 0; r + 3 < s.curve.size(); r += 4)
    std::fprintf(f, "%d,%.3f,%.3f,%.3f\n", int(s.curve[r]), s.curve[r + 1], s.curve[r + 2], s.curve[r + 3]);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const Options o = parse(argc, argv);
  const es::PolicyShape shape = shape_of(o.env, o.hidden);
  es::RunState s = fresh(o, shape);
  try {
    if (!o.state.empty()) {
      if (auto saved = es::load_state(o.state)) {
        if (const std::string d = es::differences(*saved, s); !d.empty()) {
          std::fprintf(stderr,
                       "es: cannot resume '%s': it was written by a run with %s; rerun with those options, or pass "
                       "another --state\n",
                       o.state.c_str(), d.c_str());
          return 2;
        }
        s = std::move(*saved);
        std::printf("es: resuming from %s after generation %lld\n", o.state.c_str(), (long long)s.generation);
      }
    }
  } catch (const es::StateError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  es::Adam adam{s.adam_m, s.adam_v, s.adam_t};

  fibra::Pool pool(o.workers);
  std::printf("es: %s, %d workers, population %d (%d pairs), %zu parameters, sigma %g, lr %g, seed %llu, target %g\n",
              s.env.c_str(), pool.size(), o.population, o.population / 2, shape.parameters(), o.sigma, o.lr,
              (unsigned long long)o.seed, o.target);
  std::fflush(stdout);
  bool solved = false;
  Evaluation last{};
  // When the population's mean reaches the target, the policy itself is evaluated; it is solved
  // when that mean does too. (A resumed run looks at the last generation it finished first.)
  auto check = [&](double population_mean) {
    if (population_mean < o.target) return;
    last = evaluate(pool, o, policy_of(s));
    solved = last.mean >= o.target;
    std::printf("  policy over %d episodes: %.2f +- %.2f%s\n", o.eval_episodes, last.mean, last.stddev,
                solved ? ": solved" : "");
  };
  if (s.curve.size() >= 4) check(s.curve[s.curve.size() - 3]);
  while (s.generation < o.generations && !solved) {
    const auto t0 = std::chrono::steady_clock::now();
    const Generation g = step(pool, o, shape, s, adam);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.wall_s += took;
    ++s.generation;
    s.curve.insert(s.curve.end(), {double(s.generation), g.mean, g.best, s.wall_s});
    try {
      if (!o.state.empty()) es::save_state(o.state, s);
    } catch (const es::StateError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    // For the tests: $FIBRA_ES_KILL_AFTER=k kills this driver as a lost node or the OOM killer
    // would (SIGKILL, nothing flushed) once generation k is saved.
    if (const char* k = std::getenv("FIBRA_ES_KILL_AFTER"); k && std::atoll(k) == s.generation) ::raise(SIGKILL);
    // Printed once saved: a kill after this line loses nothing of this generation.
    std::printf("generation %3lld: mean %8.2f  best %8.2f  %7.0f episodes/s  %6.0f k steps/s  (%.2f s)\n",
                (long long)s.generation, g.mean, g.best, double(o.population) / took, double(g.steps) / took / 1e3,
                took);
    std::fflush(stdout);
    write_csv(o.csv, s);
    check(g.mean);
  }
  if (!solved) last = evaluate(pool, o, policy_of(s));
  std::printf(
      "es: %s after %lld generations (%.1f s of training): mean return %.2f +- %.2f over %d episodes, "
      "target %g: %s\n",
      s.env.c_str(), (long long)s.generation, s.wall_s, last.mean, last.stddev, o.eval_episodes, o.target,
      last.mean >= o.target ? "reached" : "not reached");
  std::printf("es: learning curve in %s\n", o.csv.c_str());
  return last.mean >= o.target ? 0 : 1;
}
