// B4 of BENCHMARKS.md, the Pool part: the cost of MapOptions::checkpoint. (The store alone is
// b4_store.)
//
//   b4_checkpoint [--workers 2] [--tasks 1000000] [--runs 7] [--chunksize 0] [--dir /tmp] [--work-1us]
//
// Each run maps a cheap double -> double function (a square root; with --work-1us, about 1 us of
// square roots) over the tasks without a checkpoint, with a new
// checkpoint, and resumes that finished checkpoint (nothing left to run); the three are interleaved
// so that noise from other work hits them alike. A checkpointed call returns once its results are
// flushed to the journal; the fold into the .h5 file runs in the background, and is timed apart.
// Prints medians of the runs as a table.
#include <fibra/fibra.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

double cheap(double x) { return std::sqrt(x) * 0.5 + 1.0; }
// About a microsecond here: a chain of 100 dependent square roots.
double cheap_1us(double x) {
  double s = x;
  for (int k = 0; k < 100; ++k) s = std::sqrt(s + x);
  return s;
}
FIBRA_REMOTE(cheap);
FIBRA_REMOTE(cheap_1us);

namespace {

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

void remove_checkpoint(const std::string& path) {
  for (const char* ext : {"", ".journal", ".tmp", ".lock"}) std::filesystem::remove(path + ext);
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(arg(argc, argv, "--workers", 2));
  const long tasks = arg(argc, argv, "--tasks", 1'000'000);
  const int runs = static_cast<int>(arg(argc, argv, "--runs", 7));
  const auto chunksize = static_cast<std::size_t>(arg(argc, argv, "--chunksize", 0));
  std::string dir = std::filesystem::temp_directory_path().string();
  bool work_1us = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--dir" && i + 1 < argc) dir = argv[i + 1];
    if (std::string(argv[i]) == "--work-1us") work_1us = true;
  }
  double (*fn)(double) = work_1us ? cheap_1us : cheap;
  const std::string path = dir + "/b4_checkpoint_" + std::to_string(::getpid()) + ".h5";

  fibra::Pool pool(workers);
  std::vector<double> in(static_cast<std::size_t>(tasks));
  for (long i = 0; i < tasks; ++i) in[static_cast<std::size_t>(i)] = double(i);
  const auto expected = pool.map(fn, in, {.chunksize = chunksize});  // warm-up

  std::vector<double> plain, checkpointed, folded, resumed, digest;
  for (int r = 0; r < runs; ++r) {
    auto t = Clock::now();
    auto a = pool.map(fn, in, {.chunksize = chunksize});
    plain.push_back(seconds_since(t));

    remove_checkpoint(path);
    t = Clock::now();
    auto b = pool.map(fn, in, {.chunksize = chunksize, .checkpoint = path});
    checkpointed.push_back(seconds_since(t));
    fibra::detail::wait_for_checkpoints();  // the journal folded into the .h5 file in the background
    folded.push_back(seconds_since(t));

    t = Clock::now();
    auto c = pool.map(fn, in, {.chunksize = chunksize, .checkpoint = path});
    resumed.push_back(seconds_since(t));

    t = Clock::now();
    fibra::detail::InputsDigest d;
    d.add(std::string_view(reinterpret_cast<const char*>(in.data()), in.size() * sizeof(double)));
    volatile auto hex = d.hex();
    (void)hex;
    digest.push_back(seconds_since(t));
    if (a != expected || b != expected || c != expected) {
      std::fprintf(stderr, "b4_checkpoint: run %d returned other results\n", r);
      return 1;
    }
  }
  remove_checkpoint(path);

  const double p = median(plain), c = median(checkpointed);
  std::printf(
      "# fibra %s, %u hardware threads, %d workers, %ld tasks of double -> double (%s), chunksize %s, "
      "medians of %d runs, checkpoint in %s\n",
      fibra::version, std::thread::hardware_concurrency(), workers, tasks, work_1us ? "about 1 us" : "a square root",
      chunksize ? std::to_string(chunksize).c_str() : "automatic", runs, dir.c_str());
  std::printf("| what | median | min | max |\n| --- | --- | --- | --- |\n");
  auto row = [](const char* what, const std::vector<double>& v) {
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    std::printf("| %s | %.1f ms | %.1f ms | %.1f ms |\n", what, median(v) * 1e3, *lo * 1e3, *hi * 1e3);
  };
  row("map, no checkpoint", plain);
  row("map, new checkpoint: results returned", checkpointed);
  row("map, new checkpoint: until folded into the .h5 (background)", folded);
  row("map, resume of a finished checkpoint", resumed);
  row("inputs digest alone (8 MB)", digest);
  std::printf("checkpoint overhead: %+.1f ms (%+.1f%%)\n", (c - p) * 1e3, (c - p) / p * 100);
  return 0;
}
