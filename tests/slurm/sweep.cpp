// A small fibra job for the Slurm tests: maps `cube` over `--items` integers (shifted by the job
// array's task id) on `--workers` spawned workers and prints a result line the tests check exactly.
//
//   sweep --items N --workers W [--batch B] [--item-ms MS] [--mode plain|self-checkpoint|pool-checkpoint]
//         [--start-delay S]
//
// --start-delay: the driver of the first run (SLURM_RESTART_COUNT unset or 0) sleeps S seconds
// before fibra::Runtime, so that a test can signal it before any handler is installed.
//
// Modes:
//  - plain: one pool.map over all items.
//  - self-checkpoint: the program keeps the checkpoint contract of docs/slurm.md by itself: it maps
//    in batches, saves the finished batches' sum to $FIBRA_CHECKPOINT (text), and on SIGUSR1 or
//    SIGTERM stops after the current batch and exits with status 75. This tests the batch script's
//    side (forwarding the signal, requeue on 75, resuming) without the pool's own checkpoints.
//  - pool-checkpoint: relies on pool.map's checkpoints (MapOptions::checkpoint = $FIBRA_CHECKPOINT):
//    on SIGUSR1/SIGTERM the Pool flushes and exits 75; a rerun resumes. It says how much a resumed
//    run found done (read with fibra::hdf5_io) so that the test can tell it resumed.
#include <fibra/fibra.hpp>
#include <fibra/hdf5_io/store.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

// The work: the cube of an item, after sleeping a little so a test can signal mid-run.
long long cube(long long x) {
  static const int item_ms = std::getenv("SWEEP_ITEM_MS") ? std::atoi(std::getenv("SWEEP_ITEM_MS")) : 0;
  if (item_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(item_ms));
  return x * x * x;
}
FIBRA_REMOTE(cube);

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void on_stop_signal(int) { stop_requested = 1; }

std::string arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

long long sum_of(const std::vector<long long>& v) { return std::accumulate(v.begin(), v.end(), 0LL); }

/// Progress saved between runs: the next item to do and the sum so far.
struct Progress {
  long long next = 0, sum = 0;
};

Progress load(const char* path) {
  Progress p;
  if (path) std::ifstream(path) >> p.next >> p.sum;
  return p;
}

void save(const char* path, const Progress& p) {
  const std::string tmp = std::string(path) + ".tmp";
  std::ofstream(tmp) << p.next << ' ' << p.sum << '\n';
  std::rename(tmp.c_str(), path);  // atomic: a kill never leaves half a file
}

int run_self_checkpoint(fibra::Pool& pool, const std::vector<long long>& items, long long batch) {
  const char* path = std::getenv("FIBRA_CHECKPOINT");
  if (!path) {
    std::fprintf(stderr, "sweep: self-checkpoint mode needs FIBRA_CHECKPOINT\n");
    return 2;
  }
  Progress p = load(path);
  if (p.next > 0) std::printf("sweep: resuming at item %lld\n", p.next);
  while (p.next < static_cast<long long>(items.size())) {
    if (stop_requested) {
      save(path, p);
      std::printf("sweep: stopping for a checkpoint at item %lld\n", p.next);
      std::fflush(stdout);
      return 75;
    }
    const auto end = std::min<long long>(p.next + batch, static_cast<long long>(items.size()));
    std::vector<long long> part(items.begin() + p.next, items.begin() + end);
    p.sum += sum_of(pool.map(cube, part));
    p.next = end;
    save(path, p);
  }
  std::printf("sweep: items=%zu first=%lld sum=%lld\n", items.size(), items.front(), p.sum);
  return 0;
}

int run_pool_checkpoint(fibra::Pool& pool, const std::vector<long long>& items, long long batch) {
  const char* path = std::getenv("FIBRA_CHECKPOINT");
  if (!path) {
    std::fprintf(stderr, "sweep: pool-checkpoint mode needs FIBRA_CHECKPOINT\n");
    return 2;
  }
  if (std::filesystem::exists(path)) {
    const auto done = fibra::hdf5_io::Store::open(path, fibra::hdf5_io::Access::read_only).n_done();
    std::printf("sweep: resuming with %llu of %zu items done\n", static_cast<unsigned long long>(done), items.size());
    std::fflush(stdout);
  }
  auto r = pool.map(cube, items, {.chunksize = static_cast<std::size_t>(batch), .checkpoint = path});
  std::printf("sweep: items=%zu first=%lld sum=%lld\n", items.size(), items.front(), sum_of(r));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool driver =
      std::none_of(argv + 1, argv + argc, [](const char* a) { return std::strncmp(a, "--fibra-", 8) == 0; });
  const char* restarts = std::getenv("SLURM_RESTART_COUNT");
  if (driver && (!restarts || std::atoi(restarts) == 0)) {
    const double delay = std::atof(arg(argc, argv, "--start-delay", "0").c_str());
    if (delay > 0) {
      std::printf("sweep: start-up delay of %.1f s\n", delay);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    }
  }
  fibra::Runtime rt(argc, argv);
  const long long n = std::atoll(arg(argc, argv, "--items", "100").c_str());
  const int workers = std::atoi(arg(argc, argv, "--workers", "2").c_str());
  const long long batch = std::atoll(arg(argc, argv, "--batch", "10").c_str());
  const std::string mode = arg(argc, argv, "--mode", "plain");
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  const long long first = task ? std::atoll(task) * 1000 : 0;

  std::vector<long long> items(static_cast<std::size_t>(n));
  std::iota(items.begin(), items.end(), first);
  if (mode == "self-checkpoint") {  // pool-checkpoint: the Pool handles them once its checkpoint is open
    std::signal(SIGUSR1, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  fibra::Pool pool(workers);
  std::printf("sweep: %d workers, %lld items from %lld, mode %s, run %s\n", pool.size(), n, first, mode.c_str(),
              std::getenv("SLURM_RESTART_COUNT") ? std::getenv("SLURM_RESTART_COUNT") : "0");
  std::fflush(stdout);
  if (mode == "self-checkpoint") return run_self_checkpoint(pool, items, batch);
  if (mode == "pool-checkpoint") return run_pool_checkpoint(pool, items, batch);
  std::printf("sweep: items=%zu first=%lld sum=%lld\n", items.size(), first, sum_of(pool.map(cube, items)));
  return 0;
}
