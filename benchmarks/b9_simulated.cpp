// The scale simulation (issue 29, item 3): the driver's real code (communication loop,
// scheduler, heartbeats, loss detection) against 10 to 10,000 agents, simulated by a few processes
// that each speak the wire protocol for thousands of them (FIBRA_SIMULATED_AGENTS,
// docs/architecture.md "The scale simulation"). For each n of --agents, one pool after another of
// n agents of one worker: the time to ready, the dispatch rate (tasks of a no-op function sent and
// answered per second, and batches, the scheduler's decisions, per second), the median round trip
// of apply_async(...).get(), and the driver's CPU while idle (its agents' heartbeats still come).
// With --silent-every k, the sizes of k agents a process or more run again with every k-th agent of each
// process falling silent at its first batch (a hung node): the dispatch run then includes their
// loss (PoolOptions::worker_silence_s) and the retries of what they held, and every result is
// checked. In the benchmark suite: `benchmarks/run.sh --benchmarks sim`.
//
//   b9_simulated [--agents 10,100,1000,10000] [--processes 2] [--tasks N] [--roundtrips N]
//                [--idle-seconds S] [--silent-every K] [--worker-silence-s S]
//
// Prints CSV: benchmark,metric,value,unit.
#include <fibra/fibra.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

long twice(long x) { return 2 * x; }
FIBRA_REMOTE(twice);

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const std::vector<int> sizes = bench::int_list(argc, argv, "--agents", "10,100,1000,10000");
  const int processes = static_cast<int>(arg(argc, argv, "--processes", 2));
  const long tasks = arg(argc, argv, "--tasks", 200'000);
  const long roundtrips = arg(argc, argv, "--roundtrips", 2000);
  const int idle = static_cast<int>(arg(argc, argv, "--idle-seconds", 3));
  const long silent_every = arg(argc, argv, "--silent-every", 0);
  const double silence_s = bench::arg_double(argc, argv, "--worker-silence-s", 5);
  std::printf("# fibra %s, %u hardware threads, simulated agents of one worker in %d processes\n", fibra::version,
              std::thread::hardware_concurrency(), processes);
  std::printf("benchmark,metric,value,unit\n");
  // Every size with all agents answering; then, with --silent-every k, the sizes of k agents a
  // process or more again with every k-th falling silent (metrics silent_<k>_agents_<n>_...).
  std::vector<std::pair<int, long>> runs;
  for (int n : sizes) runs.emplace_back(n, 0);
  for (int n : sizes)
    if (silent_every > 0 && n / processes >= silent_every) runs.emplace_back(n, silent_every);
  for (const auto& [n, silent] : runs) {
    const std::string run = silent > 0 ? "silent_" + std::to_string(silent) + "_" : "";
    const int per_process = (n + processes - 1) / processes;
    ::setenv("FIBRA_SIMULATED_AGENTS", std::to_string(per_process).c_str(), 1);
    ::setenv("FIBRA_SIMULATED_SILENT_EVERY", std::to_string(silent).c_str(), 1);
    ::setenv("FIBRA_SIMULATED_SILENT_AFTER_S", "0", 1);  // at their first batch
    auto t = Clock::now();
    fibra::PoolOptions o;
    o.workers_per_agent = 1;
    o.start_timeout_s = 600;
    o.worker_silence_s = silence_s;
    fibra::Pool pool(n, o);
    const double ready = seconds_since(t);
    const auto before = pool.stats();
    std::vector<fibra::Future<long>> futures;
    futures.reserve(static_cast<std::size_t>(tasks));
    t = Clock::now();
    for (long i = 0; i < tasks; ++i) futures.push_back(pool.apply_async(twice, i));
    for (long i = 0; i < tasks; ++i)
      if (futures[static_cast<std::size_t>(i)].get() != 2 * i)
        return std::fprintf(stderr, "b9_simulated: task %ld returned a wrong result\n", i), 1;
    const double dispatch_s = seconds_since(t);
    futures.clear();
    const auto after = pool.stats();
    std::vector<double> rtt;
    for (long i = 0; i < roundtrips; ++i) {
      t = Clock::now();
      if (pool.apply_async(twice, i).get() != 2 * i) return std::fprintf(stderr, "b9_simulated: a wrong result\n"), 1;
      rtt.push_back(seconds_since(t) * 1e6);
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));  // let the last activity die down
    const double cpu0 = bench::process_cpu_seconds("self");
    std::this_thread::sleep_for(std::chrono::seconds(idle));
    const double idle_cpu = (bench::process_cpu_seconds("self") - cpu0) / idle * 100;
    const std::string m = "sim," + run + "agents_" + std::to_string(n) + "_";
    std::printf("%sready_s,%.2f,s\n", m.c_str(), ready);
    std::printf("%stasks_per_s,%.0f,tasks/s\n", m.c_str(), double(tasks) / dispatch_s);
    std::printf("%sbatches_per_s,%.0f,batches/s\n", m.c_str(),
                double(after.batches_sent - before.batches_sent) / dispatch_s);
    std::printf("%sroundtrip_us,%.1f,us\n", m.c_str(), median(rtt));
    std::printf("%sidle_driver_cpu_pct,%.2f,%%\n", m.c_str(), idle_cpu);
    std::printf("%sworkers_lost,%llu,agents\n", m.c_str(), static_cast<unsigned long long>(after.workers_lost));
    std::printf("%schunks_resubmitted,%llu,chunks\n", m.c_str(),
                static_cast<unsigned long long>(after.chunks_resubmitted - before.chunks_resubmitted));
    std::fflush(stdout);
  }
  return 0;
}
