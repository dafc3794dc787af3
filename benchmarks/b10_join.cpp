// B10 (issue 27): how long a worker started apart takes to join a running driver and run its first
// task. Two ways, each --rounds times (medians printed):
//   process: `./b10_join --fibra-join <file>` started by this program (a launch of its own, no
//            Slurm): from its start to the first task it runs;
//   slurm:   Pool::adapt submits a worker job (SLURM_CONF must name a running cluster, such as the
//            one slurm/local-cluster.sh starts): from adapt() (which submits at once: the pool is
//            under the minimum) to the first task its worker runs.
// Between rounds the joined worker leaves (it is killed, or let go once idle) and the next round
// starts from a pool of its own single worker. Task start times are CLOCK_MONOTONIC, which every
// process on the host shares.
//
//   b10_join [--rounds 10] [--ways process,slurm]
//
// Prints CSV: benchmark,metric,value,unit.
#include <fibra/fibra.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

extern char** environ;

namespace {
double monotonic_s() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

struct Ran {
  long agent = 0;
  double at = 0;  // CLOCK_MONOTONIC when it ran
};
Ran ran(long) {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return {static_cast<long>(::getppid()), monotonic_s()};
}
FIBRA_REMOTE(ran);

// The pid of the pool's joined worker once one is ready (0 after `wait_s`).
long joined_pid(const fibra::Pool& pool, double wait_s) {
  const double end = monotonic_s() + wait_s;
  while (monotonic_s() < end) {
    for (const auto& w : pool.workers())
      if (!w.joined_from.empty() && w.state == "ready") return w.pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return 0;
}

bool no_joined_left(const fibra::Pool& pool, double wait_s) {
  const double end = monotonic_s() + wait_s;
  while (monotonic_s() < end) {
    bool any = false;
    for (const auto& w : pool.workers())
      any |= !w.joined_from.empty() && (w.state == "ready" || w.state == "starting" || w.state == "retiring");
    if (!any) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// When the first task ran on agent `pid`: tasks until one does (the pool's own worker takes some).
double first_task_on(fibra::Pool& pool, long pid) {
  for (int round = 0; round < 100; ++round) {
    std::vector<long> items(8, 0);
    for (const auto& r : pool.map(ran, items, {.chunksize = 1}))
      if (r.agent == pid) return r.at;
  }
  return 0;
}

pid_t start_joiner(const std::string& exe, const std::string& file) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if ((v.rfind("OMPI_", 0) == 0 && v.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) != 0) || v.rfind("PMIX_", 0) == 0 ||
        v.rfind("FIBRA_JOIN_FILE=", 0) == 0)
      continue;
    env.push_back(v);
  }
  env.push_back("FIBRA_JOIN_WORKERS=1");
  std::vector<std::string> argv{exe, "--fibra-join", file};
  std::vector<char*> a, e;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : env) e.push_back(s.data());
  e.push_back(nullptr);
  pid_t pid = -1;
  return posix_spawn(&pid, a[0], nullptr, nullptr, a.data(), e.data()) == 0 ? pid : -1;
}

void report(const char* way, std::vector<double> v) {
  if (v.empty()) return;
  std::printf("b10_join,%s_join_to_first_task_median,%.3f,s\n", way, bench::median(v));
  std::sort(v.begin(), v.end());
  std::printf("b10_join,%s_join_to_first_task_min,%.3f,s\n", way, v.front());
  std::printf("b10_join,%s_join_to_first_task_max,%.3f,s\n", way, v.back());
  std::printf("b10_join,%s_rounds,%zu,count\n", way, v.size());
}
}  // namespace

int main(int argc, char** argv) {
  bool joiner = false;
  for (int i = 1; i < argc; ++i) joiner |= std::strcmp(argv[i], "--fibra-join") == 0;
  std::string dir;
  if (!joiner) {
    char tmpl[] = "/tmp/fibra-b10-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::setenv("FIBRA_JOIN_FILE", (dir + "/join").c_str(), 1);
  }
  fibra::Runtime rt(argc, argv);
  const int rounds = static_cast<int>(bench::arg(argc, argv, "--rounds", 10));
  const auto ways = bench::split_commas(bench::arg_str(argc, argv, "--ways", "process,slurm"));
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string file = dir + "/join";
  std::printf("benchmark,metric,value,unit\n");
  for (const auto& way : ways) {
    std::vector<double> took;
    fibra::Pool pool(1);
    for (int r = 0; r < rounds; ++r) {
      double t0 = 0;
      pid_t started = -1;
      if (way == "process") {
        t0 = monotonic_s();
        started = start_joiner(exe, file);
      } else if (way == "slurm") {
        if (!std::getenv("SLURM_CONF") && !std::filesystem::exists("/etc/slurm/slurm.conf")) {
          std::fprintf(stderr, "b10_join: no Slurm cluster (SLURM_CONF unset): the slurm way is skipped\n");
          break;
        }
        t0 = monotonic_s();
        pool.adapt(2, 2,
                   {.workers_per_job = 1,
                    .time = "00:05:00",
                    .sbatch_args = {"--mem=200M"},
                    .idle_timeout_s = 0.2,
                    .submit_gap_s = 0});
      } else {
        std::fprintf(stderr, "b10_join: unknown way %s (process, slurm)\n", way.c_str());
        return 2;
      }
      const long pid = joined_pid(pool, 120);
      if (pid == 0) {
        std::fprintf(stderr, "b10_join: no worker joined within 120 s (%s, round %d)\n", way.c_str(), r + 1);
        return 1;
      }
      const double first = first_task_on(pool, pid);
      if (first > 0) took.push_back(first - t0);
      if (way == "process") {
        ::kill(started, SIGTERM);
        ::waitpid(started, nullptr, 0);
      } else {
        pool.adapt(1, 2, {.idle_timeout_s = 0.2});  // it lets the joined worker go once idle
      }
      if (!no_joined_left(pool, 60)) {
        std::fprintf(stderr, "b10_join: the joined worker did not leave within 60 s (%s)\n", way.c_str());
        return 1;
      }
    }
    report(way.c_str(), took);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
