// A first fibra program: the mean return of 1000 simulated rollouts, run on 4 workers.
#include <fibra/fibra.hpp>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

// A stand-in for a simulator: the return of one rollout with a given seed.
double rollout(int seed) {
  double x = 0;
  for (int t = 1; t <= 1000; ++t) x += std::sin(seed * 0.001 * t) / t;
  return x;
}
FIBRA_REMOTE(rollout);  // callable on workers

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);  // first line: in spawned workers it never returns
  fibra::Pool pool(4);            // 4 workers, spawned with MPI_Comm_spawn

  std::vector<int> seeds(1000);
  std::iota(seeds.begin(), seeds.end(), 0);
  std::vector<double> returns = pool.map(rollout, seeds);  // in input order

  double mean = std::accumulate(returns.begin(), returns.end(), 0.0) / double(returns.size());
  std::printf("mean return over %zu rollouts: %.6f\n", returns.size(), mean);
  fibra::Future<double> one = pool.apply_async(rollout, 42);
  std::printf("rollout(42) = %.6f\n", one.get());
}
