// B10 (b)'s workload (benchmarks/b10_elastic.sh): a fixed amount of work, items that each take
// `ms` milliseconds of a worker (they sleep: on this 2-core machine, 16 workers of 4 virtual nodes
// cannot each have a core), run as one map. Run from a job spec (`fibra slurm submit`); prints the
// unix time of its last result, which the benchmark subtracts from the job's submission.
//
//   b10_workload <workers> <items> <ms>
#include <fibra/fibra.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

int work(int i, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return i * 3 + 1;
}
FIBRA_REMOTE(work);

namespace {
double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  if (argc < 4) return std::fprintf(stderr, "usage: b10_workload <workers> <items> <ms>\n"), 2;
  const int workers = std::atoi(argv[1]), n = std::atoi(argv[2]), ms = std::atoi(argv[3]);
  std::printf("b10: driver started at %.3f\n", unix_now());
  fibra::Pool pool(workers);  // with the spec's [elastic], it grows as worker jobs start
  std::printf("b10: %d workers ready at %.3f\n", pool.size(), unix_now());
  std::fflush(stdout);
  std::vector<std::tuple<int, int>> items;
  for (int i = 0; i < n; ++i) items.emplace_back(i, ms);
  const auto out = pool.starmap(work, items, {.chunksize = 2});
  const double end = unix_now();
  long wrong = 0;
  for (int i = 0; i < n; ++i) wrong += out[i] != i * 3 + 1;
  std::printf("b10: last result at %.3f; %d items, %ld wrong; the pool had %d workers at the end\n", end, n, wrong,
              pool.size());
  return wrong ? 1 : 0;
}
