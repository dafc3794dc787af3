// B5 of BENCHMARKS.md (part): start-up time of Pool(n), and the CPU an idle pool uses.
//
//   b5_idle [--workers N] [--idle-seconds S]
//
// CPU is summed over every process running this binary (driver, agents, executors), read from
// /proc/<pid>/stat before and after the idle period. Prints CSV: benchmark,metric,value,unit.
#include <dirent.h>
#include <fibra/fibra.hpp>
#include <unistd.h>

#include "bench_common.hpp"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

int one(int x) { return x; }
FIBRA_REMOTE(one);

namespace {

using bench::arg;

std::string exe_of(const std::string& pid) {
  char buf[4096];
  ssize_t n = ::readlink(("/proc/" + pid + "/exe").c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
}

// CPU seconds (user + system) used so far by all processes running `exe`; counts them in `procs`.
double cpu_seconds(const std::string& exe, int& procs) {
  double total = 0;
  procs = 0;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || exe_of(e->d_name) != exe) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(f, line);
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    unsigned long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoul(field);
      if (i == 15) stime = std::stoul(field);
    }
    total += double(utime + stime) / double(::sysconf(_SC_CLK_TCK));
    ++procs;
  }
  ::closedir(d);
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(arg(argc, argv, "--workers", 4));
  const int idle = static_cast<int>(arg(argc, argv, "--idle-seconds", 10));
  std::printf("# fibra %s, %u hardware threads\nbenchmark,metric,value,unit\n", fibra::version,
              std::thread::hardware_concurrency());
  auto t = bench::Clock::now();
  fibra::Pool pool(workers);
  const double start_s = bench::seconds_since(t);
  std::printf("startup_%d_workers,seconds,%.3f,s\n", workers, start_s);
  pool.map(one, std::vector<int>(100, 1), {.chunksize = 1});  // every executor has run

  const std::string exe = exe_of("self");
  std::this_thread::sleep_for(std::chrono::seconds(1));  // let the last activity die down
  int procs = 0;
  const double before = cpu_seconds(exe, procs);
  std::this_thread::sleep_for(std::chrono::seconds(idle));
  const double after = cpu_seconds(exe, procs);
  std::printf("idle_pool_%d_workers,cpu_percent_of_one_core,%.2f,%% (%d processes over %d s)\n", workers,
              100.0 * (after - before) / idle, procs, idle);
  return 0;
}
