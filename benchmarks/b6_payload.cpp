// B6 of BENCHMARKS.md: the round trip of a large std::vector<double> through apply_async, to a
// registered function that returns its input. Compare with raw_mpi's payload figures.
//
//   b6_payload [--bytes 67108864] [--repeats 5] [--workers 1] [--keep-freed-mib 256]
//              [--driver-keep-freed-mib 0]
//
// Times `pool.apply_async(echo, v).get()`; the first round trip is a warm-up and is not counted.
// Every result is checked against the input (outside the timed part). Prints CSV:
// benchmark,metric,value,unit: b6,payload_<size>_roundtrip_s (median) and
// b6,payload_<size>_bandwidth (2 * bytes / median, in MiB/s).
#include <fibra/fibra.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

// Returns its input.
std::vector<double> echo(std::vector<double> v) { return v; }
FIBRA_REMOTE(echo);

namespace {

using bench::Clock;
using bench::median;
using bench::seconds_since;

// One timed round trip of `v`; exits with a message if the result differs from the input.
double round_trip(fibra::Pool& pool, const std::vector<double>& v) {
  auto t = Clock::now();
  std::vector<double> back = pool.apply_async(echo, v).get();
  double s = seconds_since(t);
  if (back != v) {
    std::fprintf(stderr, "b6: echo returned %zu doubles that differ from the %zu sent\n", back.size(), v.size());
    std::exit(1);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const long bytes = bench::arg(argc, argv, "--bytes", 64L * 1024 * 1024);
  const int repeats = int(bench::arg(argc, argv, "--repeats", 5));
  const int workers = int(bench::arg(argc, argv, "--workers", 1));
  const long keep = bench::arg(argc, argv, "--keep-freed-mib", long(fibra::PoolOptions{}.keep_freed_mib));
  const long driver_keep =
      bench::arg(argc, argv, "--driver-keep-freed-mib", long(fibra::PoolOptions{}.driver_keep_freed_mib));
  const auto out_of_range = [](long mib) { return mib < 0 || mib > (1L << 20); };
  if (bytes < 8 || bytes % 8 != 0 || repeats < 1 || workers < 1 || out_of_range(keep) || out_of_range(driver_keep)) {
    std::fprintf(stderr,
                 "b6: --bytes must be a positive multiple of 8; --repeats and --workers at least 1; --keep-freed-mib "
                 "and --driver-keep-freed-mib 0 to 1048576\n");
    return 1;
  }

  std::printf(
      "# fibra %s, %u hardware threads, %.0f GiB, %d workers, %ld bytes, medians of %d runs after 1 warm-up, "
      "keep_freed_mib %ld, driver_keep_freed_mib %ld\n",
      fibra::version, std::thread::hardware_concurrency(), bench::memory_gib(), workers, bytes, repeats, keep,
      driver_keep);
  std::printf("benchmark,metric,value,unit\n");
  std::fflush(stdout);

  std::vector<double> v(std::size_t(bytes) / sizeof(double));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i) * 0.5;

  fibra::Pool pool(workers, {.keep_freed_mib = std::size_t(keep), .driver_keep_freed_mib = std::size_t(driver_keep)});
  round_trip(pool, v);  // warm-up
  std::vector<double> s;
  for (int r = 0; r < repeats; ++r) s.push_back(round_trip(pool, v));

  const std::string name = "payload_" + bench::size_name(bytes);
  const double mib = double(bytes) / (1024.0 * 1024.0);
  std::printf("b6,%s_roundtrip_s,%.6f,s\n", name.c_str(), median(s));
  std::printf("b6,%s_bandwidth,%.0f,MiB/s\n", name.c_str(), 2 * mib / median(s));
  return 0;
}
