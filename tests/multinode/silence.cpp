// Silence on other nodes (tests/multinode/run.sh silence): mid-map, the agent on vnode2 is stopped
// (SIGSTOP) and then vnode3's link is cut (by run.sh, asked through a file). Both are declared lost
// after worker_silence_s, their chunks run elsewhere, and every result comes back exactly once.
//
//   silence <work dir>      prints the detection times and PASS
#include <fibra/fibra.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

std::string where(int i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " " + std::to_string(long(i) * i);
}
FIBRA_REMOTE(where);

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Asks run.sh (outside the virtual nodes) for something and waits for its answer, at most 20 s.
bool ask(const std::string& work, const std::string& what) {
  std::ofstream(work + "/" + what + "-now") << "1";
  for (int i = 0; i < 200; ++i) {
    if (std::filesystem::exists(work + "/" + what + "-done")) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const std::string work = argc > 1 ? argv[1] : ".";
  const double silence_s = 3;
  fibra::Pool pool(6, {.heartbeat_s = 0.5, .worker_silence_s = silence_s, .driver_silence_s = 20});
  long stopped = 0;
  for (const auto& w : pool.workers()) {
    std::printf("agent %d: %d worker(s) on %s, pid %ld\n", w.slot, w.workers, w.host.c_str(), w.pid);
    if (w.host == "vnode2") stopped = w.pid;
  }
  if (stopped == 0) return std::printf("FAIL: no agent on vnode2\n"), 1;

  // Watches the lost-worker counter: when each loss was declared.
  std::atomic<bool> done{false};
  std::vector<double> lost_at;
  const auto t0 = Clock::now();
  std::thread watch([&] {
    std::uint64_t seen = 0;
    while (!done) {
      const auto n = pool.stats().workers_lost;
      while (seen < n) {
        lost_at.push_back(since(t0));
        ++seen;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  const int n = 1200;
  std::vector<int> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = i;
  std::vector<int> got(n, 0);
  long wrong = 0, count = 0;
  double stop_at = -1, cut_at = -1;
  bool cut = false;
  for (auto&& [i, v] : pool.imap_unordered(where, xs, {.chunksize = 4})) {
    ++got[i];
    wrong += v.substr(v.find(' ') + 1) != std::to_string(long(i) * i);
    ++count;
    if (count == 150) {
      ::kill(static_cast<pid_t>(stopped), SIGSTOP);
      stop_at = since(t0);
    }
    if (count == 300) {
      cut = ask(work, "cut");  // vnode3's link goes down
      cut_at = since(t0);
    }
  }
  const double wall = since(t0);
  done = true;
  watch.join();
  long missing = 0, twice = 0;
  for (int c : got) {
    missing += c == 0;
    twice += c > 1;
  }
  const auto s = pool.stats();
  std::printf("map of %d tasks of 20 ms on 6 workers: %.2f s; %ld wrong, %ld missing, %ld twice\n", n, wall, wrong,
              missing, twice);
  std::printf("vnode2's agent stopped at %.2f s, vnode3 cut off at %.2f s (%s)\n", stop_at, cut_at,
              cut ? "done" : "NOT DONE");
  for (std::size_t k = 0; k < lost_at.size(); ++k)
    std::printf("worker lost #%zu declared at %.2f s\n", k + 1, lost_at[k]);
  std::printf("workers lost %llu, started %llu, chunks resubmitted %llu, late results dropped %llu\n",
              (unsigned long long)s.workers_lost, (unsigned long long)s.workers_started,
              (unsigned long long)s.chunks_resubmitted, (unsigned long long)s.late_results_dropped);
  for (const auto& w : pool.workers()) std::printf("agent %d on %s: %s\n", w.slot, w.host.c_str(), w.state.c_str());
  ::kill(static_cast<pid_t>(stopped), SIGKILL);  // the stopped agent: ours, and it would never end itself
  const bool restored = ask(work, "restore");    // vnode3's link back, so that MPI can end the job
  // Each loss is declared within worker_silence_s of its cause, plus a margin for a loaded machine:
  // the first after vnode2's stop, the second after vnode3's cut.
  const double limit = silence_s + 5;
  bool in_time = lost_at.size() >= 2 && lost_at[0] - stop_at <= limit && lost_at[1] - cut_at <= limit;
  if (!in_time)
    std::printf("FAIL: the losses were not declared within %.0f s of the stop (%.2f s) and the cut (%.2f s)\n", limit,
                stop_at, cut_at);
  const bool ok = cut && restored && in_time && wrong == 0 && missing == 0 && twice == 0 && s.workers_lost >= 2;
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
