// Nested parallelism: two experiments run as tasks, and each runs its simulations as tasks of
// its own and waits for them. With 2 workers both are taken by the experiments; a task that waits
// gives its worker to the tasks it waits for, so this finishes.
//
//   ./nested   or   mpirun -n 1 ./nested        Exit status 0 and "PASS" when every sum is right.
#include <fibra/fibra.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

// A stand-in for a simulation: a deterministic score for (experiment, run, parameter).
double simulate(int experiment, int run, double parameter) {
  double x = parameter;
  for (int k = 0; k < 20000; ++k) x = std::sin(x + experiment) + 0.001 * run;
  return x;
}
FIBRA_REMOTE(simulate);

// One experiment: its runs in parallel, then their mean.
double experiment(int e, int runs) {
  std::vector<fibra::Future<double>> fs;
  for (int r = 0; r < runs; ++r) fs.push_back(fibra::submit(simulate, e, r, 0.1 * e));
  double sum = 0;
  for (auto& f : fs) sum += f.get();
  return sum / runs;
}
FIBRA_REMOTE(experiment);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::default_pool(2);
  const int experiments = 2, runs = 16;
  std::vector<fibra::Future<double>> es;
  for (int e = 0; e < experiments; ++e) es.push_back(fibra::submit(experiment, e, runs));
  bool ok = true;
  for (int e = 0; e < experiments; ++e) {
    double expect = 0;  // the same computation, here, without fibra
    for (int r = 0; r < runs; ++r) expect += simulate(e, r, 0.1 * e);
    expect /= runs;
    const double got = es[e].get();
    std::printf("experiment %d: mean score %.12f (expected %.12f)\n", e, got, expect);
    ok &= got == expect;
  }
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
