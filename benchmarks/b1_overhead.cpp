// B1 of BENCHMARKS.md: framework overhead (the Fiber paper's test). Tasks that only sleep; each
// series does `workers * scale` worker-seconds of sleeping (5,000 tasks of 1 ms for 5 workers at
// scale 1), so the ideal wall time is `scale` seconds for every duration.
//
//   b1_overhead [--workers 5] [--durations-ms 1,10,100,1000] [--modes map,seq] [--repeats 3] [--scale 1.0]
//               [--mixed 1]
//
// map: one pool.map over all tasks (automatic chunk size). seq: the paper's mode: apply_async of
// `workers` tasks, get() all of them, repeat until all tasks are done. One Pool for the whole run,
// warmed up once; runs go repeat by repeat, duration by duration, mode by mode, so noise spreads.
// Prints CSV: benchmark,metric,value,unit, with per duration and mode the median wall time
// (b1,<mode>_<dur>ms_wall) and its ratio to the ideal (b1,<mode>_<dur>ms_ratio), where
// ideal = ceil(tasks / workers) * duration (= tasks * duration / workers at the defaults).
// With --mixed 1 (the default) a series of mixed durations follows (b1,<mode>_mixed_*): 90% of
// 2 ms, 9% of 40 ms and 1% of 400 ms (a mean of 9.4 ms; 10.7 ms in the 532 tasks of scale 1),
// drawn by SplitMix64 from each task's index, the same list in every peer
// (benchmarks/peers/common.py); its ratio is to the lower bound max(total / workers, longest).
// Long tasks among short ones: a worker left with nothing to do must take work queued behind a
// long one (work stealing; Dask steals too).
#include <fibra/fibra.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

// Sleeps `us` microseconds and returns it.
int sleep_ms(int us) {
  std::this_thread::sleep_for(std::chrono::microseconds(us));
  return us;
}
FIBRA_REMOTE(sleep_ms);

namespace {

using bench::Clock;
using bench::median;
using bench::seconds_since;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "b1: %s\n", what.c_str());
  std::exit(1);
}

void check(const std::vector<int>& out, const std::vector<int>& in, const std::string& series) {
  if (out != in) fail(series + " returned wrong results");
}

// One pool.map over all tasks; returns the wall time.
double run_map(fibra::Pool& pool, const std::vector<int>& tasks, const std::string& series) {
  auto t = Clock::now();
  std::vector<int> out = pool.map(sleep_ms, tasks);
  double s = seconds_since(t);
  check(out, tasks, series);
  return s;
}

// Batches of `workers` apply_async calls, each batch waited for in full; returns the wall time.
double run_seq(fibra::Pool& pool, const std::vector<int>& tasks, int workers, const std::string& series) {
  std::vector<int> out;
  out.reserve(tasks.size());
  std::vector<fibra::Future<int>> batch;
  auto t = Clock::now();
  for (std::size_t i = 0; i < tasks.size();) {
    batch.clear();
    for (int k = 0; k < workers && i < tasks.size(); ++k, ++i) batch.push_back(pool.apply_async(sleep_ms, tasks[i]));
    for (auto& f : batch) out.push_back(f.get());
  }
  double s = seconds_since(t);
  check(out, tasks, series);
  return s;
}

// Number of tasks of `dur_ms` that make `workers * scale` worker-seconds (at least 1).
long task_count(int workers, double scale, double dur_ms) {
  return std::max(1L, std::lround(double(workers) * scale * 1000.0 / dur_ms));
}

// The mixed series' durations in microseconds (the same in benchmarks/peers/common.py).
std::vector<int> mixed_tasks(int workers, double scale) {
  const long n = std::max(1L, std::lround(double(workers) * scale * 1000.0 / 9.4));
  std::vector<int> out;
  for (long i = 0; i < n; ++i) {
    std::uint64_t z = std::uint64_t(i) + 0x9E3779B97F4A7C15ull;  // SplitMix64 of the index
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const unsigned u = unsigned(z % 100);
    out.push_back(u == 0 ? 400000 : u < 10 ? 40000 : 2000);
  }
  return out;
}

// The least wall time `tasks` can take on `workers`: their total spread evenly, or the longest.
double mixed_bound_s(const std::vector<int>& tasks, int workers) {
  double total = 0, longest = 0;
  for (int t : tasks) {
    total += t * 1e-6;
    longest = std::max(longest, t * 1e-6);
  }
  return std::max(total / workers, longest);
}

std::string series_name(const std::string& mode, double dur_ms) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s_%gms", mode.c_str(), dur_ms);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = int(bench::arg(argc, argv, "--workers", 5));
  const int repeats = int(bench::arg(argc, argv, "--repeats", 3));
  const double scale = bench::arg_double(argc, argv, "--scale", 1.0);
  const auto modes = bench::split_commas(bench::arg_str(argc, argv, "--modes", "map,seq"));
  const bool mixed = bench::arg(argc, argv, "--mixed", 1) != 0;
  std::vector<double> durations;
  for (const auto& d : bench::split_commas(bench::arg_str(argc, argv, "--durations-ms", "1,10,100,1000")))
    durations.push_back(std::atof(d.c_str()));
  for (const auto& m : modes)
    if (m != "map" && m != "seq") fail("unknown mode '" + m + "' (modes are map and seq)");
  for (double d : durations)
    if (!(d > 0)) fail("durations must be positive milliseconds");
  if (workers < 1 || repeats < 1 || !(scale > 0)) fail("--workers, --repeats and --scale must be positive");

  std::string counts;
  for (double d : durations)
    counts += (counts.empty() ? "" : ", ") + std::to_string(task_count(workers, scale, d)) + " x " +
              series_name("", d).substr(1);
  const std::vector<int> mixed_list = mixed ? mixed_tasks(workers, scale) : std::vector<int>{};
  if (mixed) counts += ", " + std::to_string(mixed_list.size()) + " mixed (2/40/400 ms)";
  std::printf("# fibra %s, %u hardware threads, %.0f GiB, %d workers, scale %g (tasks: %s), medians of %d runs\n",
              fibra::version, std::thread::hardware_concurrency(), bench::memory_gib(), workers, scale, counts.c_str(),
              repeats);
  std::printf("benchmark,metric,value,unit\n");
  std::fflush(stdout);

  fibra::Pool pool(workers);
  std::vector<int> warm(std::size_t(workers) * 4, 1000);  // executors started, one of each call kind
  run_map(pool, warm, "warm-up map");
  run_seq(pool, warm, workers, "warm-up seq");

  std::map<std::string, std::vector<double>> wall;
  for (int r = 0; r < repeats; ++r)
    for (double d : durations) {
      std::vector<int> tasks(std::size_t(task_count(workers, scale, d)), int(std::lround(d * 1000)));
      for (const auto& m : modes) {
        std::string name = series_name(m, d);
        wall[name].push_back(m == "map" ? run_map(pool, tasks, name) : run_seq(pool, tasks, workers, name));
      }
      if (mixed && d == durations.back())
        for (const auto& m : modes) {
          const std::string name = m + "_mixed";
          wall[name].push_back(m == "map" ? run_map(pool, mixed_list, name) : run_seq(pool, mixed_list, workers, name));
        }
    }

  for (double d : durations) {
    const long n = task_count(workers, scale, d);
    const double ideal = double((n + workers - 1) / workers) * d / 1000.0;
    for (const auto& m : modes) {
      std::string name = series_name(m, d);
      double w = median(wall[name]);
      std::printf("b1,%s_wall,%.3f,s\n", name.c_str(), w);
      std::printf("b1,%s_ratio,%.3f,x\n", name.c_str(), w / ideal);
    }
  }
  for (const auto& m : modes) {
    if (!mixed) break;
    const double w = median(wall[m + "_mixed"]);
    std::printf("b1,%s_mixed_wall,%.3f,s\n", m.c_str(), w);
    std::printf("b1,%s_mixed_ratio,%.3f,x\n", m.c_str(), w / mixed_bound_s(mixed_list, workers));
  }
  return 0;
}
