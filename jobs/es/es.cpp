// The demo job: OpenAI's evolution strategy (Salimans et al. 2017) learning to control a simulated
// system, each generation one round of tasks over the population: jobs/envs' CartPole-v1 and
// Acrobot-v1 (discrete actions), and fibra::rl's environments with a box of actions: the MuJoCo
// bodies (Hopper-v4, HalfCheetah-v4, Humanoid-v4, where MuJoCo was found) and Pendulum-v1.
//
//   es [--env cartpole|acrobot|pendulum|hopper|halfcheetah|humanoid|<a registered name>] [--workers 4]
//      [--population 256] [--sigma S] [--lr L] [--l2 0.005] [--hidden H] [--shift R] [--observe F]
//      [--generations 100] [--target <the env's threshold>] [--eval-episodes 100] [--seed 1]
//      [--state PATH] [--csv PATH]
//
// A candidate travels as a noise offset (a perturbation is sigma times a stretch of a shared
// noise table that every process builds from the seed) and comes back as two returns (an
// antithetic pair: theta + and - the same noise, on the same episode). The driver shapes the
// returns into centred ranks, steps Adam on the estimated gradient (with L2 decay), and keeps
// the observations' mean and spread, which the policy normalises its inputs with.
//
// On the bodies, as OpenAI's implementation runs them: the policy is a controller with a box of
// outputs (es_control.hpp; linear by default, as ARS, or one tanh hidden layer with --hidden),
// a generation is one starmap with a chunk per pair, so a worker that finishes a short episode
// takes the next pair at once and a generation of episodes of 20 to 1,000 steps is balanced by
// steps, not by episodes; a sample of the pairs (--observe,
// a fraction) sums its observations for the normalisation; --shift R takes R off each step's
// reward in training only (ARS's removal of the alive bonus, which otherwise rewards standing
// still), never in the returns reported or evaluated.
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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#ifdef FIBRA_JOBS_MUJOCO
#include <fibra/rl/mujoco.hpp>
#endif

#include "envs.hpp"
#include "es_control.hpp"
#include "es_core.hpp"
#include "es_pairs.hpp"
#include "es_state.hpp"

namespace {

// jobs/envs' two discrete environments, or one of fibra::rl's with a box of actions.
enum Env : int { cartpole = 0, acrobot = 1, box = 2 };

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
  std::string env_name;  // the registered name, for env == box
  int workers = 4, population = 0, hidden = 0, generations = 100, eval_episodes = 100;
  double sigma = 0, lr = 0, l2 = 0.005, target = 0, shift = 0, observe = 0;
  std::uint64_t seed = 1;
  std::string state, csv;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "es: %s\nusage: es [--env cartpole|acrobot|pendulum|hopper|halfcheetah|humanoid|NAME] [--workers N] "
               "[--population P (even)] [--sigma S] [--lr L] [--l2 C] [--hidden H] [--shift R] [--observe F] "
               "[--generations G] [--target T] [--eval-episodes E] [--seed S] [--state PATH] [--csv PATH]\n",
               why.c_str());
  std::exit(2);
}

// The registered name of an environment with a box of actions, from its short name.
std::string box_env_name(const std::string& v) {
  if (v == "pendulum") return "Pendulum-v1";
  if (v == "hopper") return "Hopper-v4";
  if (v == "halfcheetah") return "HalfCheetah-v4";
  if (v == "humanoid") return "Humanoid-v4";
  return v;
}

// The target where none is given: Gymnasium's thresholds for the discrete two, the 3,000
// for the hopper, Gymnasium's 4,800 for the half-cheetah, the ES paper's 6,000 for the humanoid.
bool default_target(const Options& o, double& target) {
  if (o.env == cartpole) return target = envs::CartPole::solved, true;
  if (o.env == acrobot) return target = envs::Acrobot::solved, true;
  const std::map<std::string, double> known{
      {"Pendulum-v1", -200}, {"Hopper-v4", 3000}, {"HalfCheetah-v4", 4800}, {"Humanoid-v4", 6000}};
  const auto it = known.find(o.env_name);
  return it != known.end() && (target = it->second, true);
}

// Defaults that depend on the kind of environment: the discrete two keep the settings they are
// solved with (a tanh MLP of 16, sigma 0.1, every + episode observed); the bodies get ARS's linear
// controller and OpenAI's scale of noise, 10% of the pairs observed, and no shift (on this
// project's hopper when its floor had no friction, ARS's shift of 1 a step led to a dive forward
// that ended the episode within a hundred steps; untried since: docs/rl.md).
// The options whose defaults depend on the environment, as given (empty: not given).
struct Given {
  std::optional<int> population, hidden;
  std::optional<double> sigma, lr, shift, observe;
};

void fill_defaults(Options& o, const Given& g) {
  const bool b = o.env == box;
  o.population = g.population.value_or(b ? 64 : 256);
  o.hidden = g.hidden.value_or(b ? 0 : 16);
  o.sigma = g.sigma.value_or(b ? 0.02 : 0.1);
  o.lr = g.lr.value_or(b ? 0.02 : 0.05);
  o.observe = g.observe.value_or(b ? 0.1 : 1.0);
  o.shift = g.shift.value_or(0.0);
}

Options parse(int argc, char** argv) {
  Options o;
  Given given;
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
        o.env = box, o.env_name = box_env_name(v);
    } else if (a == "--state")
      o.state = v;
    else if (a == "--csv")
      o.csv = v;
    else {
      need_number();
      if (a == "--workers")
        o.workers = int(x);
      else if (a == "--population")
        given.population = int(x);
      else if (a == "--hidden")
        given.hidden = int(x);
      else if (a == "--generations")
        o.generations = int(x);
      else if (a == "--eval-episodes")
        o.eval_episodes = int(x);
      else if (a == "--sigma")
        given.sigma = x;
      else if (a == "--lr")
        given.lr = x;
      else if (a == "--l2")
        o.l2 = x;
      else if (a == "--shift")
        given.shift = x;
      else if (a == "--observe")
        given.observe = x;
      else if (a == "--target")
        o.target = x, target_set = true;
      else if (a == "--seed")
        o.seed = std::uint64_t(x);
      else
        usage("unknown option '" + a + "'");
    }
  }
  fill_defaults(o, given);
  if (o.population < 2 || o.population % 2) usage("--population must be even and at least 2 (antithetic pairs)");
  if (o.hidden < (o.env == box ? 0 : 1) || o.hidden > 256)
    usage(o.env == box ? "--hidden must be 0 (a linear controller) to 256" : "--hidden must be 1 to 256");
  if (o.workers < 1 || o.generations < 0 || o.eval_episodes < 1 || !(o.sigma > 0) || !(o.lr > 0))
    usage("--workers, --eval-episodes at least 1, --generations at least 0, --sigma and --lr above 0");
  if (!(o.observe >= 0 && o.observe <= 1)) usage("--observe is a fraction of the pairs, 0 to 1");
  if (!(o.shift >= 0)) usage("--shift cannot be negative");
  if (o.env != box && (given.shift || given.observe))
    usage(
        "--shift and --observe are for environments with a box of actions (hopper, humanoid, ...): the discrete "
        "ones observe every pair");
  if (o.env == box) try {  // an unknown name (make_env lists the registered ones), or discrete actions
      (void)es::Controller::of(*fibra::rl::make_env(o.env_name), o.hidden);
    } catch (const std::exception& e) {
      const std::string why = e.what();
      usage(why.starts_with("es: ") ? why.substr(4) : why);
    }
  if (!target_set && !default_target(o, o.target)) usage("'" + o.env_name + "' has no known threshold: give --target");
  if (!o.state.empty() && !o.state.ends_with(".h5")) o.state += ".h5";
  if (o.csv.empty()) {
    std::string stem = o.env == cartpole ? "cartpole" : o.env == acrobot ? "acrobot" : o.env_name;
    std::transform(stem.begin(), stem.end(), stem.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    o.csv = "es-" + stem + ".csv";
  }
  return o;
}

// What the driver needs to know of the policy: its parameters and its observations.
struct Sizes {
  std::size_t parameters = 0, observations = 0;
};

Sizes sizes_of(const Options& o) {
  if (o.env != box) {
    const es::PolicyShape shape = shape_of(o.env, o.hidden);
    return {shape.parameters(), std::size_t(shape.obs)};
  }
  try {
    const auto env = fibra::rl::make_env(o.env_name);
    const es::Controller c = es::Controller::of(*env, o.hidden);
    return {c.parameters(), std::size_t(c.observations())};
  } catch (const std::exception& e) {  // an unknown name (the registered ones listed), discrete actions
    usage(e.what());
  }
}

// The run as it starts, when nothing was saved: theta small and random, no normalisation yet. (A
// linear controller starts at zero, as ARS's: every action the middle of its range.)
es::RunState fresh(const Options& o, const Sizes& sizes) {
  es::RunState s;
  s.env = o.env == cartpole ? envs::CartPole::name : o.env == acrobot ? envs::Acrobot::name : o.env_name;
  s.seed = o.seed;
  s.population = o.population;
  s.hidden = o.hidden;
  s.sigma = o.sigma;
  s.lr = o.lr;
  s.l2 = o.l2;
  s.shift = o.shift;
  s.observe = o.observe;
  es::Random r(es::mix(o.seed, 0x7417));
  s.theta.resize(sizes.parameters);
  const double scale = o.env == box && o.hidden == 0 ? 0.0 : 0.1;
  for (auto& t : s.theta) t = scale * r.normal();
  s.obs_sum.assign(sizes.observations, 0.0);
  s.obs_sumsq.assign(sizes.observations, 0.0);
  return s;
}

struct Evaluation {
  double mean = 0, stddev = 0;
};

Evaluation evaluate(fibra::Pool& pool, const Options& o, const std::vector<double>& policy) {
  std::vector<double> r;
  if (o.env == box) {  // an episode a chunk, as a generation's pairs
    std::vector<std::tuple<std::string, int, std::vector<double>, std::uint64_t>> episodes;
    for (int k = 0; k < o.eval_episodes; ++k)  // seeds apart from training's
      episodes.emplace_back(o.env_name, o.hidden, policy, es::mix(o.seed, 0xe7a1, std::uint64_t(k)));
    r = pool.starmap(evaluate_policy_box, episodes, {.chunksize = 1});
  } else {
    std::vector<std::tuple<int, int, std::vector<double>, std::uint64_t>> episodes;
    for (int k = 0; k < o.eval_episodes; ++k)
      episodes.emplace_back(o.env, o.hidden, policy, es::mix(o.seed, 0xe7a1, std::uint64_t(k)));
    r = pool.starmap(evaluate_policy, episodes);
  }
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

// The population's pairs, as the workers returned them: the returns (all the + then all the -),
// the fitness they are ranked by (the returns, less the shift per step), the steps, and the
// observations of the pairs that summed theirs.
struct Population {
  std::vector<double> returns, fitness;
  long steps = 0;
};

Population run_discrete(fibra::Pool& pool, const Options& o, const std::vector<double>& policy,
                        const std::vector<std::size_t>& offsets, const std::vector<std::uint64_t>& pair_seeds,
                        es::RunState& s) {
  const std::size_t pairs = offsets.size(), obs = s.obs_sum.size();
  std::vector<std::tuple<int, int, std::vector<double>, std::uint64_t, std::uint64_t, std::uint64_t, double>> tasks;
  for (std::size_t i = 0; i < pairs; ++i)
    tasks.emplace_back(o.env, o.hidden, policy, es::mix(o.seed, 0x401e), offsets[i], es::mix(pair_seeds[i], 0xe915),
                       o.sigma);
  const std::vector<std::vector<double>> results = pool.starmap(evaluate_pair, tasks);
  Population p;
  p.returns.resize(2 * pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto& r = results[i];
    p.returns[i] = r[0];
    p.returns[pairs + i] = r[1];
    p.steps += long(r[2]);
    for (std::size_t k = 0; k < obs; ++k) {
      s.obs_sum[k] += r[3 + k];
      s.obs_sumsq[k] += r[3 + obs + k];
    }
    s.obs_count += r[3 + 2 * obs];
  }
  p.fitness = p.returns;
  return p;
}

// On a body: a chunk per pair, so that the pool hands the next pair to whichever worker frees
// first (episodes of 20 to 1,000 steps balance by their steps). A map, not a task per pair: its
// chunks are queued ahead at the workers, where a task is sent when a worker frees (on 1 worker,
// 0.97x a plain loop against 0.87-0.92x, benchmarks/b12_es). The parameters go with each pair:
// 58 doubles for the hopper's linear controller, 31,393 for the humanoid with 64 hidden units.
Population run_box(fibra::Pool& pool, const Options& o, const std::vector<double>& policy,
                   const std::vector<std::size_t>& offsets, const std::vector<std::uint64_t>& pair_seeds,
                   es::RunState& s) {
  const std::size_t pairs = offsets.size(), obs = s.obs_sum.size();
  std::vector<es::PairArgs> args;
  args.reserve(pairs);
  for (std::size_t i = 0; i < pairs; ++i)
    args.emplace_back(o.env_name, o.hidden, policy, es::mix(o.seed, 0x401e), offsets[i], es::mix(pair_seeds[i], 0xe915),
                      o.sigma, int(es::observes(pair_seeds[i], o.observe)));
  const std::vector<std::vector<double>> results = pool.starmap(evaluate_pair_box, args, {.chunksize = 1});
  Population p;
  p.returns.resize(2 * pairs);
  p.fitness.resize(2 * pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::vector<double>& r = results[i];
    p.returns[i] = r[0];
    p.returns[pairs + i] = r[1];
    p.fitness[i] = r[0] - o.shift * r[2];
    p.fitness[pairs + i] = r[1] - o.shift * r[3];
    p.steps += long(r[2] + r[3]);
    if (r[4] > 0) {
      for (std::size_t k = 0; k < obs; ++k) {
        s.obs_sum[k] += r[5 + k];
        s.obs_sumsq[k] += r[5 + obs + k];
      }
      s.obs_count += r[4];
    }
  }
  return p;
}

Generation step(fibra::Pool& pool, const Options& o, es::RunState& s, es::Adam& adam) {
  const std::size_t n = s.theta.size(), pairs = std::size_t(o.population / 2);
  const std::uint64_t noise_seed = es::mix(o.seed, 0x401e);
  const std::vector<double> policy = es::policy_of(s);
  std::vector<std::size_t> offsets;
  std::vector<std::uint64_t> pair_seeds;
  for (std::size_t i = 0; i < pairs; ++i) {
    pair_seeds.push_back(es::mix(o.seed, std::uint64_t(s.generation), i));
    offsets.push_back(es::NoiseTable::offset(pair_seeds.back(), n));
  }
  const Population p = o.env == box ? run_box(pool, o, policy, offsets, pair_seeds, s)
                                    : run_discrete(pool, o, policy, offsets, pair_seeds, s);
  Generation g;
  g.steps = p.steps;
  for (double r : p.returns) g.mean += r / double(p.returns.size()), g.best = std::max(g.best, r);

  // The gradient estimate from centred ranks, with L2 decay; Adam climbs it.
  const std::vector<double> ranks = es::centred_ranks(p.fitness);
  const es::NoiseTable& table = es::NoiseTable::of(noise_seed);
  std::vector<double> grad(n, 0.0);
  for (std::size_t i = 0; i < pairs; ++i) {
    const double w = ranks[i] - ranks[pairs + i];
    const float* eps = table.at(offsets[i]);
    for (std::size_t j = 0; j < n; ++j) grad[j] += w * double(eps[j]);
  }
  for (std::size_t j = 0; j < n; ++j) grad[j] = grad[j] / double(p.returns.size()) - o.l2 * s.theta[j];
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
  std::fprintf(f, "generation,mean,best,wall_s,steps\n");
  for (std::size_t r = 0; r + 4 < s.curve.size(); r += 5)
    std::fprintf(f, "%d,%.3f,%.3f,%.3f,%.0f\n", int(s.curve[r]), s.curve[r + 1], s.curve[r + 2], s.curve[r + 3],
                 s.curve[r + 4]);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
#ifdef FIBRA_JOBS_MUJOCO
  fibra::rl::register_mujoco_envs();  // in every process of the run: the workers make them too
#endif
  fibra::Runtime rt(argc, argv);
  const Options o = parse(argc, argv);
  const Sizes sizes = sizes_of(o);
  es::RunState s = fresh(o, sizes);
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
  std::printf("es: %s, %d workers, population %d (%d pairs), %zu parameters, sigma %g, lr %g, seed %llu, target %g",
              s.env.c_str(), pool.size(), o.population, o.population / 2, sizes.parameters, o.sigma, o.lr,
              (unsigned long long)o.seed, o.target);
  if (o.env == box) std::printf(", reward shift %g, %g of the pairs observed", o.shift, o.observe);
  std::printf("\n");
  // Where the workers run (one host here; a Slurm allocation's nodes on a cluster).
  std::map<std::string, int> hosts;
  for (const fibra::WorkerInfo& w : pool.workers())
    if (w.state == "ready") hosts[w.host] += w.workers;
  std::string where;
  for (const auto& [host, n] : hosts) where += (where.empty() ? "" : ", ") + host + " (" + std::to_string(n) + ")";
  std::printf("es: workers on %zu host%s: %s\n", hosts.size(), hosts.size() == 1 ? "" : "s", where.c_str());
  std::fflush(stdout);
  bool solved = false;
  Evaluation last{};
  // When the population's mean reaches the target, the policy itself is evaluated; it is solved
  // when that mean does too. (A resumed run looks at the last generation it finished first.)
  auto check = [&](double population_mean) {
    if (population_mean < o.target) return;
    last = evaluate(pool, o, es::policy_of(s));
    solved = last.mean >= o.target;
    std::printf("  policy over %d episodes: %.2f +- %.2f%s\n", o.eval_episodes, last.mean, last.stddev,
                solved ? ": solved" : "");
  };
  if (s.curve.size() >= 5) check(s.curve[s.curve.size() - 4]);
  while (s.generation < o.generations && !solved) {
    const auto t0 = std::chrono::steady_clock::now();
    const Generation g = step(pool, o, s, adam);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.wall_s += took;
    ++s.generation;
    s.steps += double(g.steps);
    s.curve.insert(s.curve.end(), {double(s.generation), g.mean, g.best, s.wall_s, s.steps});
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
  if (!solved) last = evaluate(pool, o, es::policy_of(s));
  std::printf(
      "es: %s after %lld generations (%.1f s of training): mean return %.2f +- %.2f over %d episodes, "
      "target %g: %s\n",
      s.env.c_str(), (long long)s.generation, s.wall_s, last.mean, last.stddev, o.eval_episodes, o.target,
      last.mean >= o.target ? "reached" : "not reached");
  std::printf("es: learning curve in %s\n", o.csv.c_str());
  return last.mean >= o.target ? 0 : 1;
}
