// B5 of BENCHMARKS.md (part): start-up time of Pool(n), and the CPU an idle pool uses.
//
//   b5_idle [--workers 1,4,16,64] [--idle-seconds S] [--keep-freed-mib 256]
//
// For each n of --workers, one pool after another: the time from Pool(n) to all n workers ready,
// then (--idle-seconds > 0) the CPU the idle pool uses, summed over every process running this
// binary (driver, agents, executors) from /proc/<pid>/stat before and after the idle period.
// Prints CSV: benchmark,metric,value,unit, with the metric names of benchmarks/README.md.
#include <dirent.h>
#include <fibra/fibra.hpp>
#include <unistd.h>

#include "bench_common.hpp"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

int one(int x) { return x; }
FIBRA_REMOTE(one);

namespace {

using bench::arg;

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const std::vector<int> sizes = bench::int_list(argc, argv, "--workers", "4");
  const int idle = static_cast<int>(arg(argc, argv, "--idle-seconds", 10));
  const long keep = arg(argc, argv, "--keep-freed-mib", long(fibra::PoolOptions{}.keep_freed_mib));
  for (int n : sizes)
    if (n < 1) {
      std::fprintf(stderr, "b5: --workers takes positive counts, e.g. 1,4,16,64\n");
      return 1;
    }
  if (keep < 0 || keep > (1L << 20)) {
    std::fprintf(stderr, "b5: --keep-freed-mib takes 0 to 1048576\n");
    return 1;
  }
  std::printf("# fibra %s, %u hardware threads, %.0f GiB, pools of %s workers, idle %d s\n", fibra::version,
              std::thread::hardware_concurrency(), bench::memory_gib(),
              bench::arg_str(argc, argv, "--workers", "4").c_str(), idle);
  std::printf("benchmark,metric,value,unit\n");
  std::fflush(stdout);
  const std::string exe = bench::exe_of("self");
  for (int workers : sizes) {
    auto t = bench::Clock::now();
    fibra::Pool pool(workers, {.keep_freed_mib = std::size_t(keep)});
    const double start_s = bench::seconds_since(t);
    std::printf("b5,startup_%d_workers_s,%.3f,s\n", workers, start_s);
    std::fflush(stdout);
    const auto seen = pool.map(one, std::vector<int>(std::size_t(workers) * 4, 1), {.chunksize = 1});
    if (seen != std::vector<int>(std::size_t(workers) * 4, 1)) {
      std::fprintf(stderr, "b5: the pool of %d returned wrong results\n", workers);
      return 1;
    }
    if (idle <= 0) continue;
    std::this_thread::sleep_for(std::chrono::seconds(1));  // let the last activity die down
    int procs = 0;
    const double before = bench::exe_cpu_seconds(exe, procs);
    std::this_thread::sleep_for(std::chrono::seconds(idle));
    const double after = bench::exe_cpu_seconds(exe, procs);
    std::printf("# idle %d workers: %d processes over %d s\n", workers, procs, idle);
    std::printf("b5,idle_%d_workers_cpu_percent,%.2f,%%\n", workers, 100.0 * (after - before) / idle);
    std::fflush(stdout);
  }
  return 0;
}
