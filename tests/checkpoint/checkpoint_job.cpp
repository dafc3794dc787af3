// A checkpointed job for the kill, signal and h5py tests: maps `work` over N doubles with a
// checkpoint and writes the results (raw doubles, input order) to a file when it finishes.
//
//   checkpoint_job CHECKPOINT RESULTS N [--flush S] [--sleep-after S] [--received LOG]
//
// With --received, the job reads the results through imap_unordered and appends the index of each
// result it is handed to LOG ("<index>\n", one write each) before it looks at the next; every
// execution also appends its input's index to $FIBRA_CKPT_INDEX_LOG when that is set.
//
// Every execution of `work` appends one line to $FIBRA_CKPT_LOG (O_APPEND), so a test can count
// executions over several runs; each takes about $FIBRA_CKPT_WORK_US microseconds (default 100).
// With $FIBRA_CKPT_KILL_AT, $FIBRA_CKPT_KILL_PID and $FIBRA_CKPT_KILL_MARK set, the first execution
// that writes line KILL_AT or later of the log, and creates the file KILL_MARK, sends SIGKILL (or
// $FIBRA_CKPT_KILL_SIG: USR1, TERM) to KILL_PID (the driver or its mpirun), so a signal lands at an
// exact point of the work however the machine schedules the test script. Each run has its own
// mark: late workers of an earlier run find theirs taken and signal nobody. Exit status: 0 done, 75 stopped by
// SIGTERM/SIGUSR1 (rerun resumes), 1 error. Workers of a killed driver leave after 2 s of silence
// (PoolOptions::driver_silence_s).
#include <fcntl.h>
#include <fibra/fibra.hpp>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int kill_signal() {
  const char* name = std::getenv("FIBRA_CKPT_KILL_SIG");
  if (name && std::strcmp(name, "USR1") == 0) return SIGUSR1;
  if (name && std::strcmp(name, "TERM") == 0) return SIGTERM;
  if (name && std::strcmp(name, "INT") == 0) return SIGINT;
  return SIGKILL;
}

void append_line(const char* path, long value) {
  const std::string line = std::to_string(value) + "\n";
  int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());  // one write: lines never interleave
  ::close(fd);
}

double input(long i) { return double(i) * 0.25 - 100; }
long index_of(double x) { return std::lround((x + 100) * 4); }

// About FIBRA_CKPT_WORK_US microseconds of arithmetic whose result depends only on x.
double work(double x) {
  if (const char* log = std::getenv("FIBRA_CKPT_INDEX_LOG")) append_line(log, index_of(x));
  if (const char* log = std::getenv("FIBRA_CKPT_LOG")) {
    int fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (::write(fd, "x\n", 2) == 2) {
        const char* at = std::getenv("FIBRA_CKPT_KILL_AT");
        const char* pid = std::getenv("FIBRA_CKPT_KILL_PID");
        const char* mark = std::getenv("FIBRA_CKPT_KILL_MARK");
        if (at && pid && mark && ::lseek(fd, 0, SEEK_CUR) / 2 >= std::atol(at)) {
          const int m = ::open(mark, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
          if (m >= 0) {
            ::close(m);
            ::kill(std::atoi(pid), kill_signal());
          }
        }
      }
      ::close(fd);
    }
  }
  const long us = std::getenv("FIBRA_CKPT_WORK_US") ? std::atol(std::getenv("FIBRA_CKPT_WORK_US")) : 100;
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  double s = x;
  for (int k = 0; k < 64; ++k) s = std::sin(s) + x * 1e-3;
  while (std::chrono::steady_clock::now() < end) {  // busy, but the result does not depend on it
  }
  return x * 0.5 + s;
}
FIBRA_REMOTE(work);

// --own-sigint: the program's own Ctrl-C handler, which fibra must leave in place.
extern "C" void on_own_sigint(int) {
  const char msg[] = "checkpoint_job: its own SIGINT handler ran\n";
  [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: checkpoint_job CHECKPOINT RESULTS N [--flush S]\n");
    return 2;
  }
  const std::string checkpoint = argv[1], results = argv[2];
  const long n = std::atol(argv[3]);
  double flush_s = 0.1, sleep_after = 0;
  const char* received = nullptr;
  for (int i = 4; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--flush") == 0) flush_s = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--sleep-after") == 0) sleep_after = std::atof(argv[i + 1]);  // between calls
    if (std::strcmp(argv[i], "--received") == 0) received = argv[i + 1];
  }
  for (int i = 4; i < argc; ++i)
    if (std::strcmp(argv[i], "--own-sigint") == 0) std::signal(SIGINT, on_own_sigint);  // before any checkpoint

  fibra::Pool pool(2, {.heartbeat_s = 0.5, .driver_silence_s = 2});
  std::vector<double> in(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) in[i] = input(i);
  const auto t = std::chrono::steady_clock::now();
  const fibra::MapOptions o{
      .chunksize = 16, .max_inflight_chunks = 8, .checkpoint = checkpoint, .checkpoint_flush_s = flush_s};
  std::vector<double> out;
  if (received) {
    out.resize(in.size());
    for (auto&& [i, r] : pool.imap_unordered(work, in, o)) {
      append_line(received, static_cast<long>(i));
      out[i] = r;
    }
  } else {
    out = pool.map(work, in, o);
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  const std::string tmp = results + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f || std::fwrite(out.data(), sizeof(double), out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "checkpoint_job: cannot write %s\n", tmp.c_str());
    return 1;
  }
  std::rename(tmp.c_str(), results.c_str());
  std::printf("checkpoint_job: %ld results in %.3f s\n", n, took);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(sleep_after));
  return 0;
}
