// B5 with one agent per worker (issue 29): how the driver's costs grow with the number of agents
// (on a cluster, one agent per node). For each n of --agents, one pool after another, each of n
// agents of one worker (PoolOptions::workers_per_agent = 1): the time to ready, the median round
// trip of apply_async(...).get(), a map of no-ops, and the CPU the driver alone, and all of the
// program's processes (driver, agents, executors), use while the pool is idle.
//
//   b9_agents [--agents 4,16,64] [--roundtrips N] [--map-items N] [--idle-seconds S] [--settle-seconds S]
//
// Prints CSV: benchmark,metric,value,unit.
#include <fibra/fibra.hpp>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

int nop(int x) { return x; }
FIBRA_REMOTE(nop);

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const std::vector<int> sizes = bench::int_list(argc, argv, "--agents", "4,16,64");
  const long roundtrips = arg(argc, argv, "--roundtrips", 500);
  const long items = arg(argc, argv, "--map-items", 200'000);
  const int idle = static_cast<int>(arg(argc, argv, "--idle-seconds", 3));
  const int settle = static_cast<int>(arg(argc, argv, "--settle-seconds", 2));
  std::printf("# fibra %s, %u hardware threads, one worker per agent\n", fibra::version,
              std::thread::hardware_concurrency());
  std::printf("benchmark,metric,value,unit\n");
  for (int n : sizes) {
    auto t = Clock::now();
    fibra::PoolOptions o;
    o.workers_per_agent = 1;
    o.start_timeout_s = 600;
    fibra::Pool pool(n, o);
    const double ready = seconds_since(t);
    // The round trip and the map are the settled pool's: the last agents' start (their executors'
    // first steps, Open MPI's connections) is still going on on these cores when the pool is ready.
    std::this_thread::sleep_for(std::chrono::seconds(settle));
    std::vector<double> rtt;
    for (long i = 0; i < roundtrips; ++i) {
      t = Clock::now();
      if (pool.apply_async(nop, int(i)).get() != i) return std::fprintf(stderr, "b9: a wrong result\n"), 1;
      rtt.push_back(seconds_since(t) * 1e6);
    }
    std::vector<int> in(static_cast<std::size_t>(items));
    std::iota(in.begin(), in.end(), 0);
    t = Clock::now();
    const auto out = pool.map(nop, in);
    const double map_s = seconds_since(t);
    if (out != in) return std::fprintf(stderr, "b9: map returned wrong results\n"), 1;
    std::this_thread::sleep_for(std::chrono::seconds(1));  // let the last activity die down
    int procs = 0;
    const std::string exe = bench::exe_of("self");
    const double cpu0 = bench::process_cpu_seconds("self"), all0 = bench::exe_cpu_seconds(exe, procs);
    std::this_thread::sleep_for(std::chrono::seconds(idle));
    const double idle_cpu = (bench::process_cpu_seconds("self") - cpu0) / idle * 100;
    const double idle_all = (bench::exe_cpu_seconds(exe, procs) - all0) / idle * 100;
    std::printf("b9,agents_%d_ready_s,%.2f,s\n", n, ready);
    std::printf("b9,agents_%d_roundtrip_us,%.1f,us\n", n, median(rtt));
    std::printf("b9,agents_%d_map_items_per_s,%.0f,items/s\n", n, double(items) / map_s);
    std::printf("b9,agents_%d_idle_driver_cpu_pct,%.2f,%%\n", n, idle_cpu);
    std::printf("b9,agents_%d_idle_all_cpu_pct,%.2f,%% (%d processes)\n", n, idle_all, procs);
    std::fflush(stdout);
  }
  return 0;
}
