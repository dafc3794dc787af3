// B12 (issue 47): fibra::rl's sampling throughput. Environment steps a second, each step with the
// policy's inference (an MLP of two hidden layers of 64, plain C++), for W rollout actors of M
// copies each (PpoTrainer::sample: the weights out through fibra::put, a fragment of T steps back
// from each actor), against the floor: one process stepping M copies with the same policy in a
// plain loop (rl::Sampler, no fibra). Nothing is learned; the weights are the initial ones. And the
// engine alone: one environment stepped with zero actions in a plain loop (resets included), no
// policy, no Sampler: what the simulator itself gives on one core.
//
// With MuJoCo (fibra::rl_mujoco), --env Hopper-v4 or Humanoid-v4 measures the bodies of issue 48:
// its target is 2 workers on 2 cores at least 1.8x the single loop.
//
//   b12_sampling [--env CartPole-v1] [--workers 1,2,4,8] [--envs-per-worker 8] [--steps 2048]
//                [--rounds 100] [--repeats 3]
//
// Rows (benchmarks/README.md): `#` lines, then benchmark,metric,value,unit:
//   b12,floor_steps_per_s,<rate>,steps/s                one process, M copies, plain loop
//   b12,workers_<W>_steps_per_s,<rate>,steps/s          W actors x M copies
//   b12,workers_<W>_over_floor,<ratio>,x                the median of the pairs' ratios
//   b12,engine_steps_per_s,<rate>,steps/s               one environment, zero actions, no policy
// Each figure is the median of --repeats measurements of --rounds rounds (after one round to warm
// up). The floor is measured in turn with the workers (a floor run and a run of the W actors for
// each repeat, the floor first in every other one) and each ratio is of a pair run side by side, so that this machine's
// drift (the floor moved 0.57 to 1.06 M steps/s between runs of an earlier, floor-first version) cancels. Worker counts
// above the machine's cores are oversubscribed: the header says so.
#include <fibra/fibra.hpp>
#include <fibra/rl.hpp>
#include <fibra/rl/trainer.hpp>
#ifdef FIBRA_BENCH_MUJOCO
#include <fibra/rl/mujoco.hpp>
#endif

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

int main(int argc, char** argv) {
#ifdef FIBRA_BENCH_MUJOCO
  fibra::rl::register_mujoco_envs();  // in every process: the rollout actors make the environments
#endif
  fibra::Runtime rt(argc, argv);
  const std::string env = bench::arg_str(argc, argv, "--env", "CartPole-v1");
  const std::vector<int> workers = bench::int_list(argc, argv, "--workers", "1,2,4,8");
  const int m = static_cast<int>(arg(argc, argv, "--envs-per-worker", 8));
  const int steps = static_cast<int>(arg(argc, argv, "--steps", 2048));
  const int rounds = static_cast<int>(arg(argc, argv, "--rounds", 100));
  const int repeats = static_cast<int>(arg(argc, argv, "--repeats", 3));
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf(
      "# fibra %s, %u hardware threads; %s, %d copies a worker, fragments of %d steps, %d rounds, medians of %d\n",
      fibra::version, cores, env.c_str(), m, steps, rounds, repeats);
  for (int w : workers)
    if (static_cast<unsigned>(w) > cores)
      std::printf("# %d workers on %u hardware threads: oversubscribed (the driver needs one too)\n", w, cores);
  std::printf("benchmark,metric,value,unit\n");

  const auto spec = fibra::rl::PolicySpec::for_env(env);
  const fibra::rl::PolicyWeights weights = fibra::rl::initial_weights(spec, 1);
  std::vector<double> floor;  // every floor run, for its median at the end
  const auto floor_run = [&] {
    fibra::rl::Sampler sampler(env, m, 0, 1, spec);
    sampler.set_weights(weights);
    (void)sampler.sample(steps);  // (warm)
    const auto t = Clock::now();
    for (int k = 0; k < rounds; ++k) (void)sampler.sample(steps);
    floor.push_back(double(rounds) * m * steps / seconds_since(t));
    return floor.back();
  };

  for (int w : workers) {
    fibra::rl::TrainerOptions o;
    o.env = env;
    o.workers = w;
    o.envs_per_worker = m;
    o.fragment_steps = steps;
    fibra::rl::PpoTrainer trainer(o);
    (void)trainer.sample();  // (warm: the actors' processes start)
    std::vector<double> rates, ratios;
    for (int r = 0; r < repeats; ++r) {
      // The floor first in even repeats, second in odd ones: a drift of the machine's speed during
      // the run does not favour either side.
      const double before = r % 2 == 0 ? floor_run() : 0;
      const auto t = Clock::now();
      std::size_t transitions = 0;
      for (int k = 0; k < rounds; ++k)
        for (const auto& f : trainer.sample().fragments) transitions += f.size();
      rates.push_back(double(transitions) / seconds_since(t));
      ratios.push_back(rates.back() / (r % 2 == 0 ? before : floor_run()));
    }
    std::printf("b12,workers_%d_steps_per_s,%.0f,steps/s\n", w, median(rates));
    std::printf("b12,workers_%d_over_floor,%.2f,x\n", w, median(ratios));
    std::fflush(stdout);
  }
  std::printf("b12,floor_steps_per_s,%.0f,steps/s\n", median(floor));

  std::vector<double> engine;
  for (int r = 0; r < repeats; ++r) {
    const auto e = fibra::rl::make_env(env);
    const std::vector<double> zero(fibra::rl::action_size(e->action_space()), 0.0);
    std::uint64_t episode = 0;
    e->reset(episode);
    const long total = long(rounds) * m * steps;
    const auto t = Clock::now();
    for (long k = 0; k < total; ++k) {
      const fibra::rl::StepResult s = e->step(zero);
      if (s.terminated || s.truncated) e->reset(++episode);
    }
    engine.push_back(double(total) / seconds_since(t));
  }
  std::printf("b12,engine_steps_per_s,%.0f,steps/s\n", median(engine));
  return 0;
}
