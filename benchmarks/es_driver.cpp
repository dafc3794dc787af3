// The ES driver's own work per generation (issue 48, item 5), against 10 to 10,000 agents
// simulated by two processes (FIBRA_SIMULATED_AGENTS, as b9_simulated; docs/architecture.md "The
// scale simulation"): for a population of P (P/2 antithetic pairs), one generation as jobs/es runs
// it on a body: a starmap with a chunk per pair (a noise offset and an episode seed out, the two
// returns back), then the update (centred ranks of all P returns, the gradient as the sum over the
// pairs of their rank difference times their stretch of the 16 MiB noise table, Adam) over
// --parameters parameters. The pairs' function is a stand-in for an episode that costs nothing (two
// returns drawn from the seed), so the time is the driver's: dispatch and collection, and the
// update. From the driver's time per pair it prints where it saturates: a pair of --pair-seconds
// (an episode each way; 0.2 s is a hopper pair of 2 x 1,000 steps at 10,000 steps/s) keeps at
// most pair_seconds / (driver seconds per pair) workers busy.
//
//   es_driver [--agents 10,100,1000,10000] [--populations 1000,10000,100000] [--parameters 9555]
//             [--generations 3] [--pair-seconds 0.2] [--processes 2]
//
// Rows: esdriver,agents_<A>_population_<P>_{dispatch_s,update_s,generation_s,saturates_at_workers}.
// Each figure is the median of --generations generations (after one to warm up).
#include <fibra/fibra.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench_common.hpp"
#include "es_core.hpp"

// A pair whose episodes cost nothing: two returns drawn from its seed.
std::vector<double> free_pair(std::uint64_t offset, std::uint64_t seed) {
  es::Random r(es::mix(seed, offset));
  return {r.normal(), r.normal()};
}
FIBRA_REMOTE(free_pair);

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const std::vector<int> agents = bench::int_list(argc, argv, "--agents", "10,100,1000,10000");
  const std::vector<int> populations = bench::int_list(argc, argv, "--populations", "1000,10000,100000");
  const std::size_t n = static_cast<std::size_t>(arg(argc, argv, "--parameters", 9555));  // humanoid, linear
  const int generations = static_cast<int>(arg(argc, argv, "--generations", 3));
  const double pair_s = bench::arg_double(argc, argv, "--pair-seconds", 0.2);
  const int processes = static_cast<int>(arg(argc, argv, "--processes", 2));
  std::printf(
      "# fibra %s, %u hardware threads; simulated agents of one worker in %d processes; %zu parameters, medians of "
      "%d generations\n",
      fibra::version, std::thread::hardware_concurrency(), processes, n, generations);
  std::printf("benchmark,metric,value,unit\n");
  const es::NoiseTable& table = es::NoiseTable::of(es::mix(1, 0x401e));
  std::vector<double> theta(n, 0.0);
  es::Adam adam;
  for (int a : agents) {
    ::setenv("FIBRA_SIMULATED_AGENTS", std::to_string((a + processes - 1) / processes).c_str(), 1);
    fibra::PoolOptions o;
    o.workers_per_agent = 1;
    o.start_timeout_s = 600;
    fibra::Pool pool(a, o);
    for (int p : populations) {
      const std::size_t pairs = std::size_t(p / 2);
      std::vector<double> dispatch, update, total;
      for (int g = 0; g <= generations; ++g) {  // generation 0 warms up
        const auto t0 = Clock::now();
        std::vector<std::tuple<std::uint64_t, std::uint64_t>> args;
        std::vector<std::size_t> offsets;
        args.reserve(pairs);
        for (std::size_t i = 0; i < pairs; ++i) {
          const std::uint64_t seed = es::mix(1, std::uint64_t(g), i);
          offsets.push_back(es::NoiseTable::offset(seed, n));
          args.emplace_back(offsets.back(), seed);
        }
        const std::vector<std::vector<double>> results = pool.starmap(free_pair, args, {.chunksize = 1});
        const double sent = seconds_since(t0);
        const auto t1 = Clock::now();
        std::vector<double> returns(2 * pairs);
        for (std::size_t i = 0; i < pairs; ++i) returns[i] = results[i][0], returns[pairs + i] = results[i][1];
        const std::vector<double> ranks = es::centred_ranks(returns);
        std::vector<double> grad(n, 0.0);
        for (std::size_t i = 0; i < pairs; ++i) {
          const double w = ranks[i] - ranks[pairs + i];
          const float* eps = table.at(offsets[i]);
          for (std::size_t j = 0; j < n; ++j) grad[j] += w * double(eps[j]);
        }
        for (std::size_t j = 0; j < n; ++j) grad[j] = grad[j] / double(returns.size()) - 0.005 * theta[j];
        adam.step(theta, grad, 0.01);
        if (g == 0) continue;
        update.push_back(seconds_since(t1));
        dispatch.push_back(sent);
        total.push_back(seconds_since(t0));
      }
      const std::string m = "esdriver,agents_" + std::to_string(a) + "_population_" + std::to_string(p) + "_";
      const double per_pair = median(total) / double(pairs);
      std::printf("%sdispatch_s,%.4f,s\n", m.c_str(), median(dispatch));
      std::printf("%supdate_s,%.4f,s\n", m.c_str(), median(update));
      std::printf("%sgeneration_s,%.4f,s\n", m.c_str(), median(total));
      std::printf("%ssaturates_at_workers,%.0f,workers\n", m.c_str(), pair_s / per_pair);
      std::fflush(stdout);
    }
  }
  return 0;
}
