// A node lost (tests/multinode/run.sh relaunch): a checkpointed map spread over 3 nodes, run by the
// batch script that `fibra slurm render` writes. Mid-run, the first run asks run.sh (through a file)
// to kill every process of vnode3, its slurmd included. The script relaunches the driver on the
// nodes still alive (FIBRA_RELAUNCH=1, ...), which resumes from the checkpoint; the last run checks
// every result against an independent computation.
//
//   relaunch <work dir>      needs FIBRA_CHECKPOINT; prints PASS (or FAIL) in the run that finishes
#include <fibra/fibra.hpp>
#include <fibra/hdf5_io/store.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

std::string where(int i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " " + std::to_string(long(i) * i + 7);
}
FIBRA_REMOTE(where);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const std::string work = argc > 1 ? argv[1] : ".";
  const char* ckpt = std::getenv("FIBRA_CHECKPOINT");
  const char* relaunch_env = std::getenv("FIBRA_RELAUNCH");
  const int run = relaunch_env ? std::atoi(relaunch_env) : 0;
  if (!ckpt) return std::printf("FAIL: no FIBRA_CHECKPOINT (run this from its job spec)\n"), 2;
  const int n = 3000;
  std::printf("run %d: driver started at %.2f (unix time)\n", run,
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  if (std::filesystem::exists(ckpt)) {
    const auto done = fibra::hdf5_io::Store::open(ckpt, fibra::hdf5_io::Access::read_only).n_done();
    std::printf("run %d: resuming with %llu of %d results in the checkpoint\n", run, (unsigned long long)done, n);
  }
  fibra::Pool pool(6, {.heartbeat_s = 0.5, .worker_silence_s = 3, .driver_silence_s = 20});
  std::set<std::string> hosts;
  for (const auto& w : pool.workers()) {
    std::printf("run %d: agent %d: %d worker(s) on %s\n", run, w.slot, w.workers, w.host.c_str());
    hosts.insert(w.host);
  }
  std::fflush(stdout);

  // The first run asks for vnode3 to die once a third of the chunks are done.
  std::atomic<bool> finished{false};
  std::thread killer([&] {
    if (run != 0) return;
    while (!finished && pool.stats().chunks_done < 100) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (finished) return;
    std::printf("run %d: %llu chunks done; asking for vnode3 to die\n", run,
                (unsigned long long)pool.stats().chunks_done);
    std::fflush(stdout);
    std::ofstream(work + "/kill-now") << "1";
  });

  std::vector<int> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = i;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> out;
  try {
    out = pool.map(where, xs, {.chunksize = 4, .checkpoint = ckpt});
  } catch (...) {
    finished = true;
    killer.join();
    throw;
  }
  finished = true;
  killer.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long wrong = 0;
  for (int i = 0; i < n; ++i) {
    const auto sp = out[i].find(' ');
    wrong += sp == std::string::npos || out[i].substr(sp + 1) != std::to_string(long(i) * i + 7);
  }
  const auto s = pool.stats();
  std::printf("run %d: map of %d tasks done in %.2f s; %ld wrong; workers lost %llu\n", run, n, wall, wrong,
              (unsigned long long)s.workers_lost);
  const bool ok = wrong == 0 && static_cast<int>(out.size()) == n;
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
