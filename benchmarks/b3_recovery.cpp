// B3: recovery from failures. 4 workers, 4,000 tasks of 5 ms, as imap_unordered; in each repeat
// four runs on a fresh pool: no fault, an executor SIGKILLed at 30% of the results, a task that
// segfaults once, a worker agent SIGKILLed at 60%. Prints, per kind of fault (medians over the
// repeats): wall time, its excess over the no-fault run of the same repeat, the time from the
// fault to the driver seeing it and to the retry being handed out, and lost/duplicated results.
//
//   b3_recovery [--workers 4] [--tasks 4000] [--task-ms 5] [--chunksize 0] [--repeats 3]
//
// Prints CSV: benchmark,metric,value,unit, with the rows of benchmarks/README.md: b3,<f>_recovered,
// _wall_s, _excess_s, _lost, _duplicated, _detect_s, _resubmit_s for f in none, executor_kill,
// segfault_once, agent_kill. A run whose results come back wrong exits with status 1.
#include <fcntl.h>
#include <fibra/fibra.hpp>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

using Clock = std::chrono::steady_clock;

struct Task {
  int i = 0;
  int ms = 5;
  int segv_item = -1;  // this item segfaults on its first attempt
  int run = 0;         // marker folder of the run
};
struct Done {
  long value = 0;
  int pid = 0;
  int ppid = 0;
};

namespace {
std::string marker(int run) { return "/tmp/fibra-b3-" + std::to_string(run); }
double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }
}  // namespace

Done task(Task t) {
  if (t.i == t.segv_item) {
    // The first attempt records when it crashes (steady clock: one clock for all processes here).
    int fd = ::open((marker(t.run) + "/segv").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd >= 0) {
      const std::string when = std::to_string(now_s());
      (void)!::write(fd, when.data(), when.size());
      ::close(fd);
      ::raise(SIGSEGV);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(t.ms));
  return {long(t.i) * 7, ::getpid(), ::getppid()};
}
FIBRA_REMOTE(task);

namespace {

enum class Fault { none, executor_kill, segv_once, agent_kill };
const char* name(Fault f) {
  switch (f) {
    case Fault::none: return "none";
    case Fault::executor_kill: return "executor_kill";
    case Fault::segv_once: return "segfault_once";
    case Fault::agent_kill: return "agent_kill";
  }
  return "?";
}

struct Outcome {
  double wall = 0, to_detect = -1, to_retry = -1;
  long lost = 0, duplicated = 0, wrong = 0;
  std::string failed;  // the error that ended the run, if it did not finish
};

Outcome run_once(Fault fault, int workers, int tasks, int ms, long chunksize, int run) {
  std::filesystem::create_directories(marker(run));
  std::vector<Task> in(tasks);
  for (int i = 0; i < tasks; ++i) in[i] = {i, ms, fault == Fault::segv_once ? tasks / 2 : -1, run};
  fibra::Pool pool(workers);
  std::vector<int> seen(tasks, 0);
  Outcome o;
  double fault_at = 0;
  const int strike_at = fault == Fault::executor_kill ? tasks * 3 / 10 : tasks * 6 / 10;
  int n = 0;
  const double t0 = now_s();
  for (auto&& [index, d] : pool.imap_unordered(task, in, {.chunksize = static_cast<std::size_t>(chunksize)})) {
    if (++seen[index] > 1) ++o.duplicated;
    if (d.value != long(index) * 7) ++o.wrong;
    if (++n == strike_at && (fault == Fault::executor_kill || fault == Fault::agent_kill)) {
      fault_at = now_s();
      ::kill(fault == Fault::executor_kill ? d.pid : d.ppid, SIGKILL);
    }
  }
  o.wall = now_s() - t0;
  for (int s : seen) o.lost += s == 0;
  if (fault == Fault::segv_once) {
    FILE* f = std::fopen((marker(run) + "/segv").c_str(), "r");
    if (f && std::fscanf(f, "%lf", &fault_at) != 1) fault_at = 0;
    if (f) std::fclose(f);
  }
  const auto st = pool.stats();
  auto secs = [](Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); };
  if (fault != Fault::none && fault_at > 0 && st.attempts_failed > 0) {
    o.to_detect = secs(st.last_failure_seen) - fault_at;
    o.to_retry = secs(st.last_retry_sent) - fault_at;
  }
  std::filesystem::remove_all(marker(run));
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(bench::arg(argc, argv, "--workers", 4));
  const int tasks = static_cast<int>(bench::arg(argc, argv, "--tasks", 4000));
  const int ms = static_cast<int>(bench::arg(argc, argv, "--task-ms", 5));
  const long chunksize = bench::arg(argc, argv, "--chunksize", 0);
  const int repeats = static_cast<int>(bench::arg(argc, argv, "--repeats", 3));
  std::printf(
      "# fibra %s, %u hardware threads, %.0f GiB, %d workers, %d tasks of %d ms, chunk size %s, "
      "medians of %d repeats\n",
      fibra::version, std::thread::hardware_concurrency(), bench::memory_gib(), workers, tasks, ms,
      chunksize > 0 ? std::to_string(chunksize).c_str() : "automatic", repeats);
  std::printf("benchmark,metric,value,unit\n");
  std::fflush(stdout);
  const Fault faults[] = {Fault::none, Fault::executor_kill, Fault::segv_once, Fault::agent_kill};
  std::vector<std::vector<Outcome>> all(4);
  for (int r = 0; r < repeats; ++r)
    for (int k = 0; k < 4; ++k) {
      const int run = ::getpid() * 10 + k;
      try {
        all[k].push_back(run_once(faults[k], workers, tasks, ms, chunksize, run));
      } catch (const std::exception& e) {
        std::filesystem::remove_all(marker(run));
        Outcome o;
        o.failed = e.what();
        all[k].push_back(o);
      }
    }
  auto med = [](const std::vector<double>& v) { return v.empty() ? std::nan("") : bench::median(v); };
  for (int k = 0; k < 4; ++k) {
    std::vector<double> wall, excess, detect, retry;
    long lost = 0, dup = 0, wrong = 0;
    bool recovered = true;
    for (int r = 0; r < repeats; ++r) {
      const Outcome& o = all[k][r];
      if (!o.failed.empty()) {
        std::printf("# %s, repeat %d: the run failed: %s\n", name(faults[k]), r + 1, o.failed.c_str());
        recovered = false;
        continue;
      }
      wall.push_back(o.wall);
      if (all[0][r].failed.empty()) excess.push_back(o.wall - all[0][r].wall);
      if (o.to_detect >= 0) detect.push_back(o.to_detect);
      if (o.to_retry >= 0) retry.push_back(o.to_retry);
      lost += o.lost;
      dup += o.duplicated;
      wrong += o.wrong;
    }
    if (wrong > 0) {
      std::fprintf(stderr, "b3: %s: %ld results came back wrong\n", name(faults[k]), wrong);
      return 1;
    }
    recovered = recovered && lost == 0 && dup == 0;
    const char* f = name(faults[k]);
    std::printf("b3,%s_recovered,%d,bool\n", f, recovered ? 1 : 0);
    // a run that lost or duplicated results did not recover: its times are no figures (as the peers')
    std::printf("b3,%s_wall_s,%.3f,s\n", f, recovered ? med(wall) : std::nan(""));
    std::printf("b3,%s_excess_s,%.3f,s\n", f, !recovered ? std::nan("") : k == 0 ? 0.0 : med(excess));
    std::printf("b3,%s_lost,%ld,results\n", f, lost);
    std::printf("b3,%s_duplicated,%ld,results\n", f, dup);
    if (k > 0) {
      std::printf("b3,%s_detect_s,%.3f,s\n", f, med(detect));
      std::printf("b3,%s_resubmit_s,%.3f,s\n", f, med(retry));
    }
  }
  return 0;
}
