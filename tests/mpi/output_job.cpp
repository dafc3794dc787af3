// What tasks print reaches the driver's output in whole lines, each after a prefix naming its
// worker when asked (FIBRA_OUTPUT_PREFIX=1): tests/mpi/output_check.py reads this program's output.
//
// Two workers print at the same time, each line in three pieces with pauses between them (on
// stdout) and one line on stderr; with FIBRA_OUTPUT_CRASH one task prints a last piece without a
// newline and crashes, once.
#include <fibra/fibra.hpp>
#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int chatty(int i) {
  for (const char* part : {"part a,", "part b,", "end"}) {
    std::printf("line %d %s", i, part);
    std::fflush(stdout);  // three writes: without a relay, the other worker's pieces land between
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
  }
  std::printf("\n");
  std::fprintf(stderr, "err %d\n", i);
  // FIBRA_OUTPUT_CRASH=<marker file>: task 5 crashes on its first attempt only
  const char* marker = std::getenv("FIBRA_OUTPUT_CRASH");
  if (i == 5 && marker && ::open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600) >= 0) {
    std::printf("last words of %d", i);  // no newline: the relay ends it when the executor dies
    std::fflush(stdout);
    ::raise(SIGKILL);
  }
  return i;
}
FIBRA_REMOTE(chatty);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::Pool pool(2);
  std::vector<int> in{0, 1, 2, 3, 4, 5, 6, 7};
  auto out = pool.map(chatty, in, {.chunksize = 1});
  std::printf("results %s\n", out == in ? "ok" : "WRONG");
  return out == in ? 0 : 1;
}
