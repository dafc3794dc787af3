// B12 for ES (issue 48): the ES job's sampling throughput on a body. Environment steps a second
// for a generation of antithetic pairs as the job runs them (jobs/es/es_pairs.hpp: one starmap,
// a chunk per pair, the next pair to whichever worker frees first), on W workers,
// against the floor: the same pairs, the same function, called one after another in a plain loop
// in one process (no fibra). Nothing is learned. The parameters are those a run starts from (a
// linear controller at zero, perturbed by --sigma: on the hopper, episodes of 20 to 150 steps),
// or a seeded draw of --scale, or those of an ES run's state file (--state, written by jobs/es
// with the same --env and --hidden: a population part way through training, whose episodes run
// to 1,000 steps). The episodes' lengths are printed.
//
//   b12_es [--env Hopper-v4 (Pendulum-v1 without MuJoCo)] [--workers 1,2,4] [--pairs 64] [--hidden 0] [--sigma 0.02]
//          [--scale 0] [--state PATH] [--rounds 5] [--repeats 3]
//
// Rows (benchmarks/README.md): `#` lines, then benchmark,metric,value,unit:
//   b12es,floor_steps_per_s,<rate>,steps/s           the plain loop
//   b12es,workers_<W>_steps_per_s,<rate>,steps/s     W workers
//   b12es,workers_<W>_over_floor,<ratio>,x           the median of the pairs' ratios
// Each figure is the median of --repeats measurements of --rounds generations (after one to warm
// up); a floor run and a worker run are measured in turn for each repeat, the floor first in every
// other one, and each ratio is of such a pair.
#include <fibra/fibra.hpp>
#ifdef FIBRA_BENCH_MUJOCO
#include <fibra/rl/mujoco.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "es_pairs.hpp"
#include "es_state.hpp"

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

namespace {

struct Setup {
  std::string env;
  int hidden = 0, pairs = 64;
  std::size_t parameters = 0;  // the controller's
  std::vector<double> policy;  // theta, then the normalisation
  std::uint64_t noise_seed = es::mix(1, 0x401e);
};

// The arguments of round `round`'s pair `i`: its noise offset and episode seed.
std::pair<std::uint64_t, std::uint64_t> pair_of(const Setup& s, int round, int i) {
  const std::uint64_t seed = es::mix(7, std::uint64_t(round), std::uint64_t(i));
  return {es::NoiseTable::offset(seed, s.parameters), es::mix(seed, 0xe915)};
}

long steps_of(const std::vector<double>& r) { return long(r[2] + r[3]); }

}  // namespace

int main(int argc, char** argv) {
#ifdef FIBRA_BENCH_MUJOCO
  fibra::rl::register_mujoco_envs();  // in every process: the workers make the environments
#endif
  fibra::Runtime rt(argc, argv);
  Setup s;
#ifdef FIBRA_BENCH_MUJOCO
  s.env = bench::arg_str(argc, argv, "--env", "Hopper-v4");
#else  // (built without MuJoCo: the suite still gets its rows)
  s.env = bench::arg_str(argc, argv, "--env", "Pendulum-v1");
#endif
  const std::vector<int> workers = bench::int_list(argc, argv, "--workers", "1,2,4");
  s.pairs = static_cast<int>(arg(argc, argv, "--pairs", 64));
  s.hidden = static_cast<int>(arg(argc, argv, "--hidden", 0));
  const double scale = bench::arg_double(argc, argv, "--scale", 0.0);
  const int rounds = static_cast<int>(arg(argc, argv, "--rounds", 5));
  const int repeats = static_cast<int>(arg(argc, argv, "--repeats", 3));
  const double sigma = bench::arg_double(argc, argv, "--sigma", 0.02);
  const es::Controller c = es::Controller::of(es::env_named(s.env), s.hidden);
  s.parameters = c.parameters();
  const std::string state = bench::arg_str(argc, argv, "--state", "");
  if (!state.empty()) {  // theta and the normalisation as the ES job computes them
    const std::optional<es::RunState> saved = es::load_state(state);
    if (!saved || saved->theta.size() != c.parameters() || saved->obs_count <= 0) {
      std::fprintf(stderr, "b12_es: %s is not the state of an ES run on %s with --hidden %d\n", state.c_str(),
                   s.env.c_str(), s.hidden);
      return 2;
    }
    s.policy = es::policy_of(*saved);
  } else {
    es::Random r(11);
    for (std::size_t k = 0; k < c.parameters(); ++k) s.policy.push_back(scale * r.normal());
    s.policy.insert(s.policy.end(), std::size_t(c.observations()), 0.0);
    s.policy.insert(s.policy.end(), std::size_t(c.observations()), 1.0);
  }

  const unsigned cores = std::thread::hardware_concurrency();
  // The episodes' lengths in the first round, for the header.
  std::vector<long> lengths;
  for (int i = 0; i < s.pairs; ++i) {
    const auto [offset, seed] = pair_of(s, 0, i);
    const auto out = evaluate_pair_box(s.env, s.hidden, s.policy, s.noise_seed, offset, seed, sigma, 0);
    lengths.push_back(long(out[2]));
    lengths.push_back(long(out[3]));
  }
  std::sort(lengths.begin(), lengths.end());
  std::printf(
      "# fibra %s, %u hardware threads; %s, %zu parameters, %d pairs a generation (episodes of %ld to %ld steps, "
      "median %ld), %d generations, medians of %d\n",
      fibra::version, cores, s.env.c_str(), c.parameters(), s.pairs, lengths.front(), lengths.back(),
      lengths[lengths.size() / 2], rounds, repeats);
  for (int w : workers)
    if (static_cast<unsigned>(w) > cores)
      std::printf("# %d workers on %u hardware threads: oversubscribed (the driver needs one too)\n", w, cores);
  std::printf("benchmark,metric,value,unit\n");

  std::vector<double> floor;
  const auto floor_run = [&] {
    long steps = 0;
    const auto t = Clock::now();
    for (int k = 1; k <= rounds; ++k)
      for (int i = 0; i < s.pairs; ++i) {
        const auto [offset, seed] = pair_of(s, k, i);
        steps += steps_of(evaluate_pair_box(s.env, s.hidden, s.policy, s.noise_seed, offset, seed, sigma, 0));
      }
    floor.push_back(double(steps) / seconds_since(t));
    return floor.back();
  };
  const auto generation = [&](fibra::Pool& pool, int round) {
    std::vector<es::PairArgs> args;
    for (int i = 0; i < s.pairs; ++i) {
      const auto [offset, seed] = pair_of(s, round, i);
      args.emplace_back(s.env, s.hidden, s.policy, s.noise_seed, offset, seed, sigma, 0);
    }
    long steps = 0;
    for (const auto& r : pool.starmap(evaluate_pair_box, args, {.chunksize = 1})) steps += steps_of(r);
    return steps;
  };

  for (int w : workers) {
    fibra::Pool pool(w);
    (void)generation(pool, 0);  // (warm: the workers start, build the noise table, compile the model)
    std::vector<double> rates, ratios;
    for (int k = 0; k < repeats; ++k) {
      const double before = k % 2 == 0 ? floor_run() : 0;
      long steps = 0;
      const auto t = Clock::now();
      for (int g = 1; g <= rounds; ++g) steps += generation(pool, g);
      rates.push_back(double(steps) / seconds_since(t));
      ratios.push_back(rates.back() / (k % 2 == 0 ? before : floor_run()));
    }
    std::printf("b12es,workers_%d_steps_per_s,%.0f,steps/s\n", w, median(rates));
    std::printf("b12es,workers_%d_over_floor,%.2f,x\n", w, median(ratios));
    std::fflush(stdout);
  }
  std::printf("b12es,floor_steps_per_s,%.0f,steps/s\n", median(floor));
  return 0;
}
