// An elastic run (tests/multinode/run.sh elastic): a driver job of one node, rendered by `fibra slurm
// submit` from a spec with [elastic], grows with worker jobs onto the two other virtual nodes while
// a checkpointed map waits. Once two worker jobs have joined, it asks run.sh (through a file) to
// scancel one of them mid-map. It checks every result against an independent computation, that
// results came from all three nodes, the checkpoint holds every item, and that after the map the
// pool shrinks back to its own worker and no worker job is left in squeue.
//
// With `killed`, the driver kills itself (SIGKILL) once a worker job has joined: run.sh checks that
// the batch script leaves no worker job behind.
//
//   elastic <work dir> [killed]   needs FIBRA_CHECKPOINT and FIBRA_ELASTIC_* (from its job spec);
//                                 prints PASS or FAIL (nothing, killed)
#include <fibra/fibra.hpp>
#include <fibra/hdf5_io/store.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

std::string where(int i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(25));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " " + std::to_string(long(i) * i + 3);
}
FIBRA_REMOTE(where);

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Worker jobs of this job that squeue shows pending or running ("" when none; "?" when squeue fails).
std::string worker_jobs_left() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string cmd = std::string("timeout 20 squeue -h -t PENDING,CONFIGURING,RUNNING,COMPLETING -o '%i %T' -n ") +
                          "fibra-worker-" + (job ? job : "?") + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "?";
  char b[256];
  while (std::fgets(b, sizeof b, p)) out += b;
  return ::pclose(p) == 0 ? out : "? (" + out + ")";
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const std::string work = argc > 1 ? argv[1] : ".";
  const char* ckpt = std::getenv("FIBRA_CHECKPOINT");
  if (!ckpt || !std::getenv("FIBRA_ELASTIC_MAX_JOBS"))
    return std::printf("FAIL: no FIBRA_CHECKPOINT or FIBRA_ELASTIC_MAX_JOBS (run this from its job spec)\n"), 2;
  const int n = 2400;
  const auto t0 = std::chrono::steady_clock::now();
  // One worker of its own; the spec's [elastic] makes it adapt (up to 1 + 2 jobs of 4 workers)
  fibra::Pool pool(1, {.heartbeat_s = 0.5, .worker_silence_s = 3, .driver_silence_s = 20});
  std::printf("pool of %d worker(s) started in %.1f s\n", pool.size(), since(t0));
  std::fflush(stdout);

  // Once two worker jobs have joined, one of them is cancelled (by run.sh, with scancel).
  const bool killed = argc > 2 && std::string(argv[2]) == "killed";
  std::atomic<bool> finished{false};
  std::string cancelled;
  std::set<std::string> joined_jobs, joined_hosts;
  std::thread canceller([&] {
    while (!finished) {
      std::map<std::string, std::string> jobs;  // Slurm job -> host, of joined workers ready now
      for (const auto& w : pool.workers())
        if (!w.joined_from.empty() && w.state == "ready") {
          jobs[w.joined_from] = w.host;
          joined_jobs.insert(w.joined_from);
          joined_hosts.insert(w.host);
        }
      // (killed: once one has joined and another waits in the queue, which only a cancel ends)
      if (killed && !jobs.empty() && worker_jobs_left().find("PENDING") != std::string::npos) {
        std::printf("%.1f s: %s joined, and squeue shows:\n%s; the driver kills itself (SIGKILL)\n", since(t0),
                    jobs.begin()->first.c_str(), worker_jobs_left().c_str());
        std::fflush(stdout);
        ::kill(::getpid(), SIGKILL);
      }
      if (!killed && jobs.size() >= 2) {
        cancelled = jobs.begin()->first.substr(std::string("Slurm job ").size());
        std::printf("%.1f s: worker jobs joined:", since(t0));
        for (const auto& [j, h] : jobs) std::printf(" %s on %s;", j.c_str(), h.c_str());
        std::printf(" %llu chunks done; asking for job %s to be cancelled\n",
                    (unsigned long long)pool.stats().chunks_done, cancelled.c_str());
        std::fflush(stdout);
        std::ofstream(work + "/cancel-now") << cancelled << "\n";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  std::vector<int> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = i;
  std::vector<std::string> out;
  try {
    out = pool.map(where, xs, {.chunksize = 4, .checkpoint = ckpt});
  } catch (...) {
    finished = true;
    canceller.join();
    throw;
  }
  finished = true;
  canceller.join();
  const double map_s = since(t0);
  std::vector<std::string> fails;
  long wrong = 0;
  std::map<std::string, int> by_host;
  for (int i = 0; i < n; ++i) {
    const auto sp = out[i].find(' ');
    if (sp == std::string::npos || out[i].substr(sp + 1) != std::to_string(long(i) * i + 3)) {
      ++wrong;
      continue;
    }
    ++by_host[out[i].substr(0, sp)];
  }
  std::printf("%.1f s: map of %d items done; %ld wrong; items by host:", map_s, n, wrong);
  for (const auto& [h, c] : by_host) std::printf(" %s %d;", h.c_str(), c);
  std::printf(" workers lost %llu\n", (unsigned long long)pool.stats().workers_lost);
  if (wrong || static_cast<int>(out.size()) != n) fails.push_back(std::to_string(wrong) + " result(s) wrong");
  if (by_host.size() < 3) fails.push_back("results came from " + std::to_string(by_host.size()) + " node(s), not 3");
  if (cancelled.empty()) fails.push_back("two worker jobs never joined at once, so none was cancelled");
  if (!cancelled.empty() && pool.stats().workers_lost < 1)
    fails.push_back("the worker of cancelled job " + cancelled + " was never shown lost");
  const auto done = fibra::hdf5_io::Store::open(ckpt, fibra::hdf5_io::Access::read_only).n_done();
  if (done != static_cast<unsigned long long>(n))
    fails.push_back("the checkpoint holds " + std::to_string(done) + " of " + std::to_string(n) + " items");

  // Idle now: the joined workers go after idle_timeout_s, down to the pool's own worker.
  const auto idle_from = std::chrono::steady_clock::now();
  int joined_alive = 0;
  for (;;) {
    joined_alive = 0;
    for (const auto& w : pool.workers())
      joined_alive += !w.joined_from.empty() && w.state != "gone" && w.state != "lost";
    if (joined_alive == 0 && pool.size() == 1) break;
    if (since(idle_from) > 40) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double shrink_s = since(idle_from);
  std::printf("after the map: size %d, %d joined worker(s) alive, %.1f s after it ended\n", pool.size(), joined_alive,
              shrink_s);
  if (joined_alive || pool.size() != 1)
    fails.push_back("40 s after the map the pool had size " + std::to_string(pool.size()) + " and " +
                    std::to_string(joined_alive) + " joined worker(s) alive, not its own 1 worker");
  std::string left;
  for (int i = 0; i < 100 && !(left = worker_jobs_left()).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (!left.empty()) fails.push_back("worker jobs still in squeue 20 s after the pool shrank: " + left);
  std::printf("worker jobs joined before the cancel: %zu, on", joined_jobs.size());
  for (const auto& h : joined_hosts) std::printf(" %s", h.c_str());
  std::printf("\n");
  for (const auto& f : fails) std::printf("FAIL: %s\n", f.c_str());
  std::printf(fails.empty() ? "PASS\n" : "FAIL\n");
  return fails.empty() ? 0 : 1;
}
