// B2 of BENCHMARKS.md: throughput of tiny tasks and the round trip of one call.
//
//   b2_throughput [--workers N] [--map-tasks N] [--async-tasks N] [--roundtrips N] [--repeats R]
//
// Prints one line per figure, as CSV: benchmark,metric,value,unit (medians of R runs), with the
// metric names of benchmarks/README.md. The map runs at fibra's automatic chunk size, which is
// also reported as its best (chunk size 0: automatic).
#include <fibra/fibra.hpp>

#include <algorithm>
#include "bench_common.hpp"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

int noop(int x) { return x; }
FIBRA_REMOTE(noop);

namespace {

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(arg(argc, argv, "--workers", 2));
  const long map_tasks = arg(argc, argv, "--map-tasks", 10'000'000);
  const long async_tasks = arg(argc, argv, "--async-tasks", 200'000);
  const long roundtrips = arg(argc, argv, "--roundtrips", 2'000);
  const int repeats = static_cast<int>(arg(argc, argv, "--repeats", 5));

  std::printf("# fibra %s, %u hardware threads, %d workers, medians of %d runs\n", fibra::version,
              std::thread::hardware_concurrency(), workers, repeats);
  std::printf("benchmark,metric,value,unit\n");
  fibra::Pool pool(workers);

  std::vector<int> input(static_cast<std::size_t>(map_tasks));
  std::iota(input.begin(), input.end(), 0);
  std::vector<double> map_rate, async_rate, rtt;
  for (int r = 0; r < repeats; ++r) {
    auto t = Clock::now();
    auto out = pool.map(noop, input);
    map_rate.push_back(double(map_tasks) / seconds_since(t));
    if (out != input) {
      std::fprintf(stderr, "b2: map returned wrong results\n");
      return 1;
    }

    t = Clock::now();
    std::vector<fibra::Future<int>> fs;
    fs.reserve(static_cast<std::size_t>(async_tasks));
    for (long i = 0; i < async_tasks; ++i) fs.push_back(pool.apply_async(noop, static_cast<int>(i)));
    long sum_ok = 0;
    for (long i = 0; i < async_tasks; ++i) sum_ok += fs[static_cast<std::size_t>(i)].get() == i;
    async_rate.push_back(double(async_tasks) / seconds_since(t));
    if (sum_ok != async_tasks) {
      std::fprintf(stderr, "b2: apply_async returned wrong results\n");
      return 1;
    }

    std::vector<double> trips;
    trips.reserve(static_cast<std::size_t>(roundtrips));
    for (long i = 0; i < roundtrips; ++i) {
      t = Clock::now();
      const int back = pool.apply_async(noop, static_cast<int>(i)).get();
      trips.push_back(seconds_since(t) * 1e6);
      if (back != i) {
        std::fprintf(stderr, "b2: a round trip returned a wrong result\n");
        return 1;
      }
    }
    rtt.push_back(median(trips));
  }
  std::printf("b2,map_noop_tasks_per_s,%.0f,tasks/s\n", median(map_rate));
  std::printf("b2,map_noop_best_tasks_per_s,%.0f,tasks/s\n", median(map_rate));
  std::printf("b2,map_noop_best_chunksize,0,tasks\n");
  std::printf("b2,apply_async_noop_tasks_per_s,%.0f,tasks/s\n", median(async_rate));
  std::printf("b2,roundtrip_us,%.1f,us\n", median(rtt));
  return 0;
}
