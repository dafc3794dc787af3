// B8 (issue 28, item 10): the object store. One large value (100 MB by default) read by 8 tasks,
// passed by value (encoded and sent for each task, as before fibra::put) and by reference
// (fibra::put once, the Future given to each task), on the same pool in the same run; with the
// driver's peak resident memory during each. FIBRA_LANES=0 takes the agents' way (as to workers
// on another host): then each agent is sent the object once.
// Then a task's result of that size given to 8 tasks, and the same result fetched by the driver,
// with results kept where they were made (the default, PoolOptions::keep_results_from) and on a
// pool that keeps none (through the driver, as before), in turn in the same run.
//
//   b8_objects [--workers N] [--mb M] [--tasks T] [--repeats R]
//
// Prints one line per figure, as CSV: benchmark,metric,value,unit (medians of R runs).
#include <fibra/fibra.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

double total(std::vector<double> v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
FIBRA_REMOTE(total);

std::vector<double> make_values(long n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i % 1000);
  return v;
}
FIBRA_REMOTE(make_values);

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

namespace {
// The driver's peak resident memory since the last reset, in MiB (VmHWM; reset by clear_refs 5).
double peak_mib() {
  std::ifstream st("/proc/self/status");
  for (std::string line; std::getline(st, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  return 0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }
}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(arg(argc, argv, "--workers", 2));
  const long mb = arg(argc, argv, "--mb", 100);
  const long tasks = arg(argc, argv, "--tasks", 8);
  const int repeats = static_cast<int>(arg(argc, argv, "--repeats", 5));
  const char* lanes = std::getenv("FIBRA_LANES");
  std::printf("# fibra %s, %u hardware threads, %d workers, %ld MB read by %ld tasks, lanes %s, medians of %d runs\n",
              fibra::version, std::thread::hardware_concurrency(), workers, mb, tasks,
              lanes && std::string(lanes) == "0" ? "off" : "on", repeats);
  std::printf("benchmark,metric,value,unit\n");
  fibra::Pool pool(workers);
  std::vector<double> v(std::size_t(mb) * 1'000'000 / sizeof(double));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i % 1000);
  const double want = total(v);

  // One round: `tasks` tasks given what `argument()` makes (the vector, or a put of it: timed too),
  // each checked; its wall time and the driver's peak memory go to `secs` and `peaks`.
  auto round = [&](auto argument, std::vector<double>& secs, std::vector<double>& peaks) {
    reset_peak();
    const auto t = Clock::now();
    std::vector<fibra::Future<double>> fs;
    {
      const auto& arg = argument();  // a put's Future lives to this scope's end, then only its tasks hold it
      for (long i = 0; i < tasks; ++i) fs.push_back(pool.submit(total, arg));
    }
    bool ok = true;
    for (auto& f : fs) ok &= f.get() == want;
    secs.push_back(seconds_since(t));
    peaks.push_back(peak_mib());
    return ok;
  };
  std::vector<double> by_value, by_ref, peak_value, peak_ref;
  for (int r = 0; r < repeats; ++r) {
    if (!round([&]() -> const std::vector<double>& { return v; }, by_value, peak_value))
      return std::fprintf(stderr, "b8: a task by value returned a wrong sum\n"), 1;
    if (!round([&] { return fibra::put(v); }, by_ref, peak_ref))
      return std::fprintf(stderr, "b8: a task by reference returned a wrong sum\n"), 1;
  }
  std::printf("b8,by_value_s,%.3f,s\n", median(by_value));
  std::printf("b8,by_reference_s,%.3f,s\n", median(by_ref));
  std::printf("b8,speedup,%.2f,x\n", median(by_value) / median(by_ref));
  std::printf("b8,driver_peak_by_value_mib,%.0f,MiB\n", median(peak_value));
  std::printf("b8,driver_peak_by_reference_mib,%.0f,MiB\n", median(peak_ref));
  std::printf("b8,objects_sent,%llu,copies\n", static_cast<unsigned long long>(pool.stats().objects_sent));
  std::printf("b8,objects_fetched_from_peers,%llu,copies\n",
              static_cast<unsigned long long>(pool.stats().objects_fetched_from_peers));

  // A task's result given to `tasks` tasks (`chain`), or fetched by the driver (`fetch`), on
  // `p`: each checked; wall times to `chain` and `fetch`.
  const long n = static_cast<long>(v.size());
  auto result_rounds = [&](fibra::Pool& p, std::vector<double>& chain, std::vector<double>& peaks,
                           std::vector<double>& fetch) {
    reset_peak();
    auto t = Clock::now();
    std::vector<fibra::Future<double>> fs;
    {
      auto made = p.submit(make_values, n);
      for (long i = 0; i < tasks; ++i) fs.push_back(p.submit(total, made));
    }
    bool ok = true;
    for (auto& f : fs) ok &= f.get() == want;
    chain.push_back(seconds_since(t));
    peaks.push_back(peak_mib());
    t = Clock::now();
    ok &= total(p.submit(make_values, n).get()) == want;
    fetch.push_back(seconds_since(t));
    return ok;
  };
  std::vector<double> chain_kept, chain_through, fetch_kept, fetch_through, peak_kept, peak_through;
  fibra::Pool through(workers, {.keep_results_from = 0});
  for (int r = 0; r < repeats; ++r) {
    if (!result_rounds(pool, chain_kept, peak_kept, fetch_kept) ||
        !result_rounds(through, chain_through, peak_through, fetch_through))
      return std::fprintf(stderr, "b8: a task given a task's result returned a wrong sum\n"), 1;
  }
  std::printf("b8,result_to_tasks_kept_s,%.3f,s\n", median(chain_kept));
  std::printf("b8,result_to_tasks_through_driver_s,%.3f,s\n", median(chain_through));
  std::printf("b8,result_to_tasks_speedup,%.2f,x\n", median(chain_through) / median(chain_kept));
  std::printf("b8,driver_peak_result_kept_mib,%.0f,MiB\n", median(peak_kept));
  std::printf("b8,driver_peak_result_through_mib,%.0f,MiB\n", median(peak_through));
  std::printf("b8,result_to_driver_kept_s,%.3f,s\n", median(fetch_kept));
  std::printf("b8,result_to_driver_through_s,%.3f,s\n", median(fetch_through));
  std::printf("b8,results_kept,%llu,results\n", static_cast<unsigned long long>(pool.stats().results_kept));
  std::printf("b8,results_stored_on_arrival,%llu,results\n",
              static_cast<unsigned long long>(pool.stats().results_stored_on_arrival));
  return 0;
}
